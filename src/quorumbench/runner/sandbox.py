"""Where model code runs: a sandbox with no network, read-only files and limits.

A model's code (a ``trust_remote_code`` module, a tokenizer, a converter) runs in a
worker process (``runner/sandbox_worker.py``) inside a sandbox made fresh for each
loaded model:

* **bubblewrap** (``bwrap``, preferred): new user, network, PID, IPC and UTS
  namespaces, a new session, all capabilities dropped, killed with the runner. The
  root is empty except what is bound read-only: the system (``/usr``, ``/etc``'s
  loader and user files), this Python and the directories on its ``sys.path``, and
  the model's files. ``/tmp`` is a private, size-limited tmpfs; ``$HOME`` points
  into it. ``/proc`` is the sandbox's own, ``/dev`` a minimal one.
* **unshare** (the fallback, util-linux): the same namespaces through
  ``unshare``, and the worker builds the same root itself before it imports
  anything (``runner/_jail.py``: bind mounts, ``chroot``, capabilities dropped).
* **none**: only when asked for explicitly (``--no-sandbox``); a loud warning.

The worker's environment is built from nothing (no ``QB_RUNNER_*``, no token, no
key path); it sets its own limits (address space, processes, file size, no core
dumps) before loading anything. As root, ``RLIMIT_NPROC`` is not enforced, so the
process limit is a pids cgroup (``runner/_cgroup.py``) the sandbox enters before it
starts. Killing the sandbox's first process ends its PID namespace, so every
process in it dies too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import quorumbench
from quorumbench.errors import ConfigError
from quorumbench.runner._cgroup import pids_root
from quorumbench.runner.sandbox_worker import BOOT

log = logging.getLogger("quorumbench.runner")

SandboxKind = Literal["auto", "bwrap", "unshare", "none"]
Tool = Literal["bwrap", "unshare"]

SANDBOX_HOME = "/tmp/home"
SANDBOX_UID = 65534
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "alternatives",
    "os-release",
)
SECRET_NAMES = (".ssh", ".gnupg", ".config", ".aws", ".netrc", ".docker", ".kube", ".env")
"""Under ``$HOME``: a sandbox never sees a directory that holds one of these."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed worker."""

    memory_mb: int | None
    """Address space (``RLIMIT_AS``); ``None``: no limit (CUDA needs a huge one)."""
    processes: int
    """Processes and threads (``RLIMIT_NPROC`` in the sandbox, or a pids cgroup)."""
    tmp_mb: int = 1024
    """Size of the private ``/tmp`` (a tmpfs), also the largest file it may write."""

    def as_json(self, file_mb: int | None = None) -> dict[str, Any]:
        return {
            "memory_bytes": None if self.memory_mb is None else self.memory_mb << 20,
            "processes": self.processes,
            "file_bytes": (file_mb or self.tmp_mb) << 20,
        }


def default_memory_mb() -> int:
    """Three quarters of this machine's memory (at least 2 GiB)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(2048, (total * 3 // 4) >> 20)


def _gpu_devices(device: str) -> tuple[Path, ...]:
    if device == "cpu":
        return ()
    return tuple(sorted(Path("/dev").glob("nvidia*")))


@dataclass(frozen=True)
class Layout:
    """What a sandbox shows: read-only and writable binds, system symlinks, devices."""

    readable: tuple[Path, ...]
    writable: tuple[Path, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    devices: tuple[Path, ...] = ()

    def to_json(self, tmp_bytes: int) -> dict[str, Any]:
        return {
            "readable": [str(p) for p in self.readable],
            "writable": [str(p) for p in self.writable],
            "symlinks": [list(s) for s in self.symlinks],
            "devices": [str(p) for p in self.devices],
            "tmp_bytes": tmp_bytes,
        }


def _python_paths() -> list[Path]:
    """This Python (prefixes, executable) and its import path, minus the cwd."""
    cwd = Path.cwd()
    package_root = Path(quorumbench.__file__).resolve().parent.parent
    paths = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)]
    paths += [Path(sys.executable), Path(os.path.realpath(sys.executable)), package_root]
    for entry in sys.path:
        if entry and Path(entry).resolve() != cwd:
            paths.append(Path(entry))
    return paths


def base_python() -> Path:
    """This Python's own interpreter, outside any virtual environment: generated code
    runs on it with the standard library only (no site-packages of the runner's
    environment, where a bundled model may lie)."""
    return Path(getattr(sys, "_base_executable", None) or sys.executable)


def _interpreter_paths() -> list[Path]:
    """The base interpreter and its standard library, nothing of the environment."""
    python = base_python()
    return [
        Path(sys.base_prefix),
        Path(sys.base_exec_prefix),
        python,
        Path(os.path.realpath(python)),
    ]


def protected_paths(extra: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """Paths a sandbox must never see: secrets under ``$HOME``, the runner's key file,
    the ``.env`` beside it and ``$XDG_CONFIG_HOME``."""
    home = Path.home()
    found = [home / name for name in SECRET_NAMES]
    found += [Path.cwd() / ".env", *extra]
    if os.environ.get("XDG_CONFIG_HOME"):
        found.append(Path(os.environ["XDG_CONFIG_HOME"]))
    return tuple(Path(os.path.abspath(p)) for p in found)


def _check_exposure(path: Path, protected: tuple[Path, ...]) -> None:
    home = Path(os.path.abspath(Path.home()))
    if path == Path("/") or home.is_relative_to(path):
        raise ConfigError(f"refusing to show {path} to the sandbox: it holds the home directory")
    for secret in protected:
        if secret.is_relative_to(path) or path.is_relative_to(secret):
            raise ConfigError(f"refusing to show {path} to the sandbox: it holds {secret}")


def layout(
    model_paths: tuple[Path, ...],
    *,
    writable: tuple[Path, ...] = (),
    device: str = "cpu",
    protected: tuple[Path, ...] = (),
    interpreter_only: bool = False,
) -> Layout:
    """The binds for a worker that loads ``model_paths``; refuses any that would show a
    protected path (a home directory, a key, ``.ssh``). ``interpreter_only``: the base
    interpreter and its standard library instead of this environment's import path
    (for generated code, ``runner/code_exec.py``)."""
    symlinks: list[tuple[str, str]] = []
    wanted: list[Path] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            symlinks.append((os.readlink(path), name))
        elif path.is_dir():
            wanted.append(path)
    wanted += [Path("/etc") / name for name in ETC_FILES if (Path("/etc") / name).exists()]
    wanted += _interpreter_paths() if interpreter_only else _python_paths()
    for path in model_paths:
        absolute = Path(os.path.abspath(path))
        _check_exposure(absolute, protected)
        wanted.append(absolute)
    readable: list[Path] = []
    for path in sorted({Path(os.path.abspath(p)) for p in wanted if p.exists()}):
        if any(path.is_relative_to(kept) for kept in readable):
            continue
        if path not in model_paths:
            try:
                _check_exposure(path, protected)
            except ConfigError:
                continue  # a Python path holding a secret is left out, not shown
        readable.append(path)
    for path in writable:
        _check_exposure(path, protected)
    return Layout(tuple(readable), tuple(sorted(writable)), tuple(symlinks), _gpu_devices(device))


def worker_env(threads: int | None) -> dict[str, str]:
    """The worker's whole environment: nothing of the runner's but thread counts."""
    count = str(threads or os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_HOME,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "HF_HOME": "/tmp/hf",
        "XDG_CACHE_HOME": "/tmp/cache",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": count,
        "MKL_NUM_THREADS": count,
        "OPENBLAS_NUM_THREADS": count,
    }
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


@dataclass(frozen=True)
class Sandbox:
    """A working sandbox tool and the limits its workers get."""

    tool: Tool
    binary: str
    limits: Limits
    protected: tuple[Path, ...] = ()
    features: frozenset[str] = field(default_factory=frozenset)
    """bwrap options this bwrap knows (``--disable-userns``, ``--size``)."""

    def command(self, where: Layout, *, file_mb: int | None = None) -> list[str]:
        """The command line that starts a worker inside this sandbox."""
        limits = self.limits.as_json(file_mb)
        if where.devices:  # CUDA reserves far more address space than it uses
            limits["memory_bytes"] = None
        config: dict[str, Any] = {"path": [p for p in sys.path if p], "limits": limits}
        python = [sys.executable, "-I", "-B", "-c", BOOT]
        if self.tool == "unshare":
            config["jail"] = where.to_json(self.limits.tmp_mb << 20)
            return [*self.unshare_prefix(), "--", *python, json.dumps(config)]
        return [*self.bwrap_prefix(where), "--", *python, json.dumps(config)]

    def unshare_prefix(self) -> list[str]:
        # unshare has no --die-with-parent: setpriv gives it a parent-death signal, and
        # --kill-child passes its death on to the sandbox.
        setpriv = shutil.which("setpriv")
        return [
            *([setpriv, "--pdeathsig", "KILL"] if setpriv else []),
            self.binary,
            "--user",
            "--map-root-user",
            "--net",
            "--pid",
            "--ipc",
            "--uts",
            "--mount",
            "--fork",
            "--kill-child",
        ]

    def bwrap_prefix(self, where: Layout) -> list[str]:
        args = [self.binary, "--unshare-all", "--unshare-user"]
        if "--disable-userns" in self.features:
            args.append("--disable-userns")
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
        args += ["--die-with-parent", "--new-session", "--hostname", "quorumbench-sandbox"]
        if "--size" in self.features:
            args += ["--size", str(self.limits.tmp_mb << 20)]
        args += ["--tmpfs", "/tmp"]  # first: the binds below may lie under /tmp
        for target, link in where.symlinks:
            args += ["--symlink", target, link]
        for path in where.readable:
            args += ["--ro-bind", str(path), str(path)]
        for path in where.writable:
            args += ["--bind", str(path), str(path)]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for device in where.devices:
            args += ["--dev-bind", str(device), str(device)]
        if where.devices:
            args += ["--ro-bind", "/sys", "/sys"]
        args += ["--dir", SANDBOX_HOME, "--chdir", "/tmp"]
        return args


@cache
def _bwrap_features(binary: str) -> frozenset[str]:
    try:
        text = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError:
        return frozenset()
    return frozenset(f for f in ("--disable-userns", "--size") if f in text)


def _probe(argv: list[str]) -> str | None:
    """None when ``argv`` (a sandbox around ``true``) runs, else why not."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _try(tool: Tool, limits: Limits, protected: tuple[Path, ...]) -> Sandbox | str:
    binary = shutil.which(tool)
    if binary is None:
        return f"{tool} is not installed"
    if tool == "bwrap":
        sandbox = Sandbox(tool, binary, limits, protected, _bwrap_features(binary))
        argv = [*sandbox.bwrap_prefix(layout(())), "--", "true"]
    else:
        sandbox = Sandbox(tool, binary, limits, protected)
        argv = [*sandbox.unshare_prefix(), "--mount-proc", "--", "true"]
    why = _probe(argv)
    return sandbox if why is None else f"{tool} cannot make a sandbox here ({why})"


MODEL_CODE = (
    "model code",
    "pass --no-sandbox to run models in the runner's own process (only for models you trust)",
)
"""What a sandbox is for, and the way out when none can be made (the runner's)."""


def resolve_sandbox(
    kind: SandboxKind,
    limits: Limits,
    protected: tuple[Path, ...] = (),
    *,
    purpose: tuple[str, str] = MODEL_CODE,
) -> Sandbox | None:
    """The sandbox ``kind`` asks for (``None`` for "none"); a :class:`ConfigError`
    with one clear line when it cannot be made. ``purpose``: what it is for and the
    way out, for that line."""
    if kind == "none":
        log.warning(
            "NO SANDBOX (--no-sandbox): model code runs in the runner's own process, with "
            "your network, your files and your signing key; only evaluate models you trust"
        )
        return None
    tools: tuple[Tool, ...] = ("bwrap", "unshare") if kind == "auto" else (kind,)
    reasons = []
    for tool in tools:
        found = _try(tool, limits, protected)
        if isinstance(found, Sandbox):
            if os.geteuid() == 0 and pids_root() is None:
                log.warning(
                    "running as root without a writable pids cgroup: the kernel does not "
                    "limit root's processes, so a model could exhaust this machine's; run "
                    "the runner as an ordinary user"
                )
            return found
        reasons.append(found)
    what, way_out = purpose
    raise ConfigError(
        f"no sandbox for {what}: {'; '.join(reasons)}. Install bubblewrap "
        f"(e.g. `apt-get install bubblewrap`), or {way_out}"
    )
