"""Running generated code: a fresh sandbox per program (the runner's ``CodeExecutor``).

A code benchmark (HumanEval, MBPP) hands :meth:`CodeRunner.run` one self-contained
Python program: the prompt, the model's completion, the tests and the call that runs
them. Each program gets a sandbox of its own, made by the runner's sandbox tool
(``runner/sandbox.py``) and gone when the program ends:

* no network (a new, empty network namespace), its own PID, IPC and UTS namespaces,
  no capabilities;
* a read-only root that shows only the system (``/usr``, the loader's files in
  ``/etc``) and this Python's base interpreter with its standard library: not the
  runner's environment (where a bundled model lies), no model files, no benchmark
  data, no home directory, no key;
* a private, size-limited ``/tmp`` (a tmpfs) as its working directory and ``$HOME``;
* limits set before the program starts: address space, CPU time, file size, no core
  dumps, and processes (a pids cgroup when the runner is root, where the kernel does
  not enforce ``RLIMIT_NPROC``);
* a wall-clock timeout: past it the whole sandbox is killed (its PID namespace, so
  every process it forked) and the program's status is ``timeout``.

The interpreter runs with ``-s -P -B`` (no user site, no unsafe path, no bytecode
files) in an environment built from nothing but ``PYTHONHASHSEED=0``, so a set of
strings iterates in the same order on every runner and two runners score the same
completion alike. A program passes when its last statement returned: the bootstrap
then writes a nonce it got from the runner to a private pipe. A completion that calls
``sys.exit(0)`` or ``os._exit(0)`` before the tests ran fails, though it exited with
status 0. (Only code written to dig the nonce out of the bootstrap's own frame could
forge a pass; runners would all agree on that forgery, and the outputs are public.)

Without a sandbox (``--no-sandbox`` only) the same bootstrap runs in a plain
subprocess, in a private temporary directory, with the same limits and a loud
warning: it can read and write whatever the runner can.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from typing import IO

from quorumbench.evaluation.execution import Execution
from quorumbench.runner._cgroup import PidsCgroup, pids_root, sweep
from quorumbench.runner.sandbox import Limits, Sandbox, base_python, layout

log = logging.getLogger("quorumbench.runner")

CODE_LIMITS = Limits(memory_mb=1024, processes=32, tmp_mb=64)
"""Limits of one program: 1 GiB of address space, 32 processes and threads, a 64 MiB
``/tmp`` (also the largest file it may write)."""
OUTPUT_KEEP = 4096
"""Bytes of a program's output (stdout and stderr together) kept for its detail."""
DETAIL_CHARS = 300
STARTED = b"S"
PYTHON_FLAGS = ("-s", "-P", "-B")

BOOT = r"""
def main():
    import json, os, resource, sys
    config = json.loads(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in ("AS", "NPROC", "FSIZE"):
        value = config[name]
        if value is not None:
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
    cpu = config["CPU"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    marker = config["marker_fd"]
    os.write(marker, b"S")
    nonce = sys.stdin.buffer.readline().strip()
    source = sys.stdin.buffer.read()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    with open("program.py", "wb") as file:
        file.write(source)
    del source
    import runpy, traceback
    try:
        runpy.run_path("program.py", run_name="__main__")
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(marker, nonce)
    os._exit(0)


main()
"""
"""The bootstrap (standard library only): set the limits, say it started, read the
nonce and the program from stdin, run the program as ``__main__``, then write the
nonce: only a program that ran to its end passes."""

JAIL_BOOT = (
    "import json, os, sys; config = json.loads(sys.argv[1]); sys.path[:] = config['path']; "
    "from quorumbench.runner._jail import enter; enter(config['jail']); "
    "os.execv(config['python'], config['argv'])"
)
"""The ``unshare`` fallback's first step: build the root (``runner/_jail.py``), then
become the bootstrap on the base interpreter, without capabilities."""


def code_env() -> dict[str, str]:
    """A program's whole environment: nothing of the runner's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
    }


def _printable(text: str) -> str:
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= DETAIL_CHARS else "…" + clean[-DETAIL_CHARS:]


def _last_line(output: bytes) -> str:
    lines = [line for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    return _printable(lines[-1]) if lines else ""


@dataclass
class _Run:
    """One program's process and what it said."""

    process: subprocess.Popen[bytes]
    cgroup: PidsCgroup | None
    marker_read: int
    output: collections.deque[bytes]
    threads: list[threading.Thread]


class CodeRunner:
    """A :class:`~quorumbench.evaluation.execution.CodeExecutor`: each program in a
    fresh sandbox of ``sandbox``'s tool, or (``sandbox`` None, ``--no-sandbox``
    only) in a plain subprocess with the same limits."""

    def __init__(self, sandbox: Sandbox | None, limits: Limits = CODE_LIMITS) -> None:
        self.sandbox = None if sandbox is None else replace(sandbox, limits=limits)
        self.limits = limits
        self.python = str(base_python())
        self.where = (
            None
            if self.sandbox is None
            else layout((), protected=self.sandbox.protected, interpreter_only=True)
        )
        if sandbox is None:
            log.warning(
                "NO SANDBOX for generated code: code benchmarks run the model's programs "
                "in plain subprocesses, with your network, your files and your signing "
                "key; only limits on memory, CPU time and processes apply"
            )

    @property
    def kind(self) -> str:
        return "none" if self.sandbox is None else self.sandbox.tool

    def _config(self, cpu_s: int, marker: int) -> str:
        memory = self.limits.memory_mb
        return json.dumps(
            {
                "AS": None if memory is None else memory << 20,
                "NPROC": self.limits.processes,
                "FSIZE": self.limits.tmp_mb << 20,
                "CPU": cpu_s,
                "marker_fd": marker,
            }
        )

    def _argv(self, config: str) -> list[str]:
        boot = [self.python, *PYTHON_FLAGS, "-c", BOOT, config]
        if self.sandbox is None or self.where is None:
            return boot
        where = self.where
        if self.sandbox.tool == "bwrap":
            return [*self.sandbox.bwrap_prefix(where), "--remount-ro", "/", "--", *boot]
        jail = where.to_json(self.limits.tmp_mb << 20)
        first = {"path": [p for p in sys.path if p], "jail": jail, "python": self.python}
        first["argv"] = boot
        jailer = [sys.executable, "-I", "-B", "-c", JAIL_BOOT, json.dumps(first)]
        return [*self.sandbox.unshare_prefix(), "--", *jailer]

    def run(self, program: str, *, timeout_s: float) -> Execution:
        """Run ``program`` in a fresh sandbox; ``passed`` only when it ran to its end."""
        nonce = secrets.token_hex(16)
        read_end, write_end = os.pipe()
        started = time.monotonic()
        try:
            with contextlib.ExitStack() as stack:
                cwd = None if self.sandbox else stack.enter_context(tempfile.TemporaryDirectory())
                config = self._config(math.ceil(timeout_s), write_end)
                run = self._start(config, (read_end, write_end), cwd)
                if isinstance(run, Execution):
                    return run
                os.close(write_end)
                write_end = -1
                self._feed(run, f"{nonce}\n{program}".encode())
                return self._finish(run, nonce, timeout_s, started)
        finally:
            for fd in (read_end, write_end):
                if fd >= 0:
                    os.close(fd)

    def _start(self, config: str, marker: tuple[int, int], cwd: str | None) -> _Run | Execution:
        argv = self._argv(config)
        cgroup = None
        if os.geteuid() == 0:
            root = pids_root()
            if root is not None:
                sweep(root)
                try:
                    cgroup = PidsCgroup(root, self.limits.processes)
                except OSError as exc:
                    return Execution("error", f"cannot make a pids cgroup: {exc}")
                argv = cgroup.wrap(argv)
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=code_env(),
                cwd=cwd,
                pass_fds=(marker[1],),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            if cgroup is not None:
                cgroup.destroy()
            return Execution("error", f"cannot start the {self.kind} sandbox: {exc}")
        output: collections.deque[bytes] = collections.deque()
        assert process.stdout is not None
        reader = threading.Thread(target=_drain, args=(process.stdout, output), daemon=True)
        reader.start()
        return _Run(process, cgroup, marker[0], output, [reader])

    def _feed(self, run: _Run, data: bytes) -> None:
        def write(stream: IO[bytes]) -> None:
            with contextlib.suppress(OSError):  # it died first: its status says why
                stream.write(data)
                stream.close()

        assert run.process.stdin is not None
        writer = threading.Thread(target=write, args=(run.process.stdin,), daemon=True)
        writer.start()
        run.threads.append(writer)

    def _finish(self, run: _Run, nonce: str, timeout_s: float, started: float) -> Execution:
        timed_out = False
        try:
            status = run.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            status = None
        finally:
            self._kill(run)
        seconds = time.monotonic() - started
        said = _read_marker(run)
        output = b"".join(run.output)
        if not said.startswith(STARTED):
            why = "did not start the program"
            if timed_out:
                why += f" within {timeout_s:g} s"
            tail = _last_line(output)
            return Execution("error", f"the {self.kind} sandbox {why}: {tail}", seconds)
        if timed_out:
            return Execution("timeout", f"still running after {timeout_s:g} s (killed)", seconds)
        if status == 0 and said[len(STARTED) :] == nonce.encode():
            return Execution("passed", "", seconds)
        return Execution("failed", _failure(status, output), seconds)

    def _kill(self, run: _Run) -> None:
        """Kill everything the program started and wait for it."""
        process = run.process
        if self.sandbox is None:  # no PID namespace: its session is what is left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("a code sandbox (pid %s) did not die within 10 s", process.pid)
        if run.cgroup is not None:
            run.cgroup.destroy()
        for thread in run.threads:
            thread.join(timeout=2)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _drain(stream: IO[bytes], kept: collections.deque[bytes]) -> None:
    size = 0
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(stream.fileno(), 65536):
            kept.append(chunk)
            size += len(chunk)
            while size > OUTPUT_KEEP and len(kept) > 1:
                size -= len(kept.popleft())


def _read_marker(run: _Run) -> bytes:
    """What the bootstrap wrote to its pipe (everything in it is dead by now)."""
    os.set_blocking(run.marker_read, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(run.marker_read, 256):
            chunks.append(chunk)
            if sum(map(len, chunks)) > 256:
                break
    return b"".join(chunks)


def _failure(status: int | None, output: bytes) -> str:
    line = _last_line(output)
    if status is not None and status > 128:  # the sandbox reports a signal as 128 + its number
        status = 128 - status
    if status is not None and status < 0:
        how = f"killed by signal {-status}"
        if -status in (signal.SIGXCPU, signal.SIGKILL):
            how += " (a CPU-time or memory limit?)"
        return f"{how}: {line}" if line else how
    if status == 0:
        return "exited before its tests finished (status 0)"
    return line or f"exit status {status}"


def code_runner(sandbox: Sandbox | None) -> CodeRunner:
    """The executor for generated code that goes with the runner's ``sandbox``."""
    return CodeRunner(sandbox)
