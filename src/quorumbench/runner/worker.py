"""The runner's side of a sandboxed worker: start it, talk to it, kill it.

:func:`load_sandboxed` fetches a model's files in the runner's process (the network
is allowed here), converts a GGUF file in a sandbox of its own when the cache lacks
it, then starts a worker in a fresh sandbox that loads the files offline. The
:class:`SandboxedBackend` it returns is an ordinary
:class:`~quorumbench.evaluation.backend.ModelBackend`: the engine, the scoring and
the hashing stay in the runner; only generation and log-likelihoods run inside.

While it waits for the worker, the runner calls ``watch()`` every
:data:`POLL_S` seconds; the runner's loop passes a function that raises when the
task's time is up, a stop was requested or the lease was lost. Whatever ends a
wait early (that exception, the worker dying, a malformed answer) kills the whole
sandbox, and a killed worker is never used again.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from quorumbench.backends import BackendOptions, _llama_lib
from quorumbench.backends._files import require
from quorumbench.backends.local import LocalModel, fetch_model, on_llama_cpp
from quorumbench.errors import EvaluationTimeoutError, SandboxError
from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Progress,
    no_progress,
)
from quorumbench.evaluation.usage import current_usage
from quorumbench.runner import protocol
from quorumbench.runner._cgroup import PidsCgroup, pids_root, sweep
from quorumbench.runner.faults import RunnerSetupError
from quorumbench.runner.sandbox import Layout, Sandbox, layout, worker_env

log = logging.getLogger("quorumbench.runner")

POLL_S = 0.1
STDERR_KEEP = 4096
"""Bytes of the worker's stderr kept for the log when it dies."""
CONVERT_FILE_MB = 1 << 20
"""Largest file a GGUF conversion may write (1 TiB: no practical limit)."""
Watch = Callable[[], None]
_EOF = object()


def _no_watch() -> None:
    pass


def _printable(text: str, limit: int = 500) -> str:
    """Worker text made safe for a log line: no control characters, bounded."""
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= limit else "…" + clean[-limit:]


class Worker:
    """One sandboxed worker process (see the module docstring)."""

    def __init__(
        self,
        sandbox: Sandbox,
        where: Layout,
        *,
        threads: int | None = None,
        file_mb: int | None = None,
    ) -> None:
        argv = sandbox.command(where, file_mb=file_mb)
        self.cgroup: PidsCgroup | None = None
        if os.geteuid() == 0:
            root = pids_root()
            if root is not None:
                sweep(root)
                self.cgroup = PidsCgroup(root, sandbox.limits.processes)
                argv = self.cgroup.wrap(argv)
        self._messages: queue.Queue[Any] = queue.Queue()
        self._stderr: collections.deque[bytes] = collections.deque()
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=worker_env(threads),
                start_new_session=True,  # Ctrl-C in the terminal reaches the runner only
                close_fds=True,
            )
        except OSError as exc:  # this machine's tool, not the model: a setup error
            self._remove_cgroup()
            raise RunnerSetupError(
                f"cannot start the {sandbox.tool} sandbox ({exc}): check that it still works "
                "here (`quorumbench runner start` tests it when it starts)"
            ) from exc
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True),
            threading.Thread(target=self._drain, args=(self.process.stderr,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self.dead = False

    @property
    def alive(self) -> bool:
        return not self.dead and self.process.poll() is None

    def _read(self, stream: IO[bytes]) -> None:
        while True:
            line = stream.readline(protocol.MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > protocol.MAX_LINE_BYTES:
                self._messages.put(SandboxError("the sandboxed worker sent an oversized line"))
                break
            try:
                self._messages.put(json.loads(line))
            except ValueError:
                self._messages.put(SandboxError("the sandboxed worker broke the protocol"))
                break
        self._messages.put(_EOF)

    def _drain(self, stream: IO[bytes]) -> None:
        kept = 0
        while chunk := os.read(stream.fileno(), 65536):
            self._stderr.append(chunk)
            kept += len(chunk)
            while kept > STDERR_KEEP and len(self._stderr) > 1:
                kept -= len(self._stderr.popleft())

    def _death(self) -> SandboxError:
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        tail = self.stderr_tail()
        if tail:
            log.warning("the sandboxed worker's last output: %s", tail)
        how = f"exit status {status}" if status is not None and status >= 0 else "killed"
        if status is not None and status < 0:
            how = f"killed by signal {-status}"
        return SandboxError(f"the sandboxed worker died ({how}; a memory or process limit?)")

    def stderr_tail(self) -> str:
        """The end of what the worker printed, made safe for a log line."""
        return _printable(b"".join(self._stderr).decode("utf-8", "replace"))

    def call(
        self, message: dict[str, Any], watch: Watch = _no_watch, progress: Progress = no_progress
    ) -> Any:
        """Send ``message``; the ``done`` value. Anything else kills the worker."""
        if self.dead:
            raise SandboxError("the sandboxed worker was stopped earlier")
        try:
            return self._call(message, watch, progress)
        except BaseException as exc:
            self.kill()
            log.debug("sandboxed worker killed (%r); its last output: %s", exc, self.stderr_tail())
            raise

    def _call(self, message: dict[str, Any], watch: Watch, progress: Progress) -> Any:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except OSError:
            raise self._death() from None
        last_watch = time.monotonic()
        while True:
            try:
                item = self._messages.get(timeout=POLL_S)
            except queue.Empty:
                item = None
            if time.monotonic() - last_watch >= POLL_S or item is None:
                watch()
                last_watch = time.monotonic()
            if item is None:
                continue
            if item is _EOF:
                raise self._death()
            if isinstance(item, SandboxError):
                raise item
            event = item.get("event") if isinstance(item, dict) else None
            if event == "progress":
                progress(protocol.check_count(item.get("n")))
            elif event == "done":
                return item.get("value")
            elif event == "error":
                text = _printable(str(item.get("message", "")))
                raise SandboxError(f"in the sandbox: {text}")
            elif event != "ready":
                raise SandboxError(f"the sandboxed worker sent an unknown event {event!r}")

    def kill(self) -> None:
        """Kill the whole sandbox (every process in it) and wait for it."""
        self.dead = True
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("the sandbox (pid %s) did not die within 10 s", self.process.pid)
        self._remove_cgroup()
        for reader in self._readers:  # they end at the pipes' end, now that all are dead
            if reader is not threading.current_thread():
                reader.join(timeout=1)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _remove_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the worker to end (stdin closed), then kill whatever is left."""
        if not self.dead and self.process.stdin is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=timeout_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class SandboxedBackend:
    """A :class:`ModelBackend` whose model lives in a sandboxed :class:`Worker`."""

    def __init__(self, worker: Worker, info: ModelInfo) -> None:
        self.worker = worker
        self._info = info

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def alive(self) -> bool:
        return self.worker.alive

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]:
        message = {
            "op": "generate",
            "requests": [protocol.encode_generate(r) for r in requests],
            "batch_size": batch_size,
        }
        value = self._call_measured(message, progress)
        return protocol.decode_generate_results(value, len(requests))

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]:
        message = {
            "op": "choose",
            "requests": [protocol.encode_choice(r) for r in requests],
            "batch_size": batch_size,
        }
        value = self._call_measured(message, progress)
        return protocol.decode_choice_results(value, len(requests))

    def _call_measured(self, message: dict[str, Any], progress: Progress) -> Any:
        """Call the worker; when an evaluation is measured, the worker measures the
        operation (its backend's timings, CPU seconds, memory peaks) and this adds them
        to the measurement."""
        usage = current_usage()
        if usage is None:
            return self.worker.call(message, lambda: progress(0), progress)
        value = self.worker.call({**message, "measure": True}, lambda: progress(0), progress)
        figures = self.worker.call({"op": "usage"}, lambda: progress(0))
        if isinstance(figures, dict) and figures:
            try:
                usage.merge(figures)
            except ValueError as exc:  # a worker's bad figures are dropped, not invented
                log.warning("the worker's measurements are unusable: %s", exc)
        return value

    def count_tokens(self, text: str) -> int:
        deadline = time.monotonic() + 60

        def watch() -> None:
            if time.monotonic() > deadline:
                raise EvaluationTimeoutError("counting tokens took over 60 s")

        return protocol.check_count(self.worker.call({"op": "count_tokens", "text": text}, watch))

    def close(self) -> None:
        self.worker.close()


def _options_json(options: BackendOptions) -> dict[str, Any]:
    return {
        "device": options.device,
        "dtype": options.dtype,
        "allow_pickle": options.allow_pickle,
        "trust_remote_code": options.trust_remote_code,
        "threads": options.threads,
        "engine": options.engine,
    }


def _check_conversion(directory: Path) -> None:
    """A sandboxed conversion may leave only plain files and directories."""
    for path in directory.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise SandboxError(f"the GGUF conversion left an unexpected entry: {path.name}")


def convert_sandboxed(
    model: LocalModel, options: BackendOptions, sandbox: Sandbox, watch: Watch = _no_watch
) -> None:
    """Convert a GGUF file into the cache in a sandbox that may write only there."""
    from quorumbench.backends.gguf import conversion_slot
    from quorumbench.backends.local import MARKER

    assert model.gguf_file is not None
    with conversion_slot(model.gguf_digest, model.directory.parent.parent) as staging:
        if staging is None:
            return
        where = layout(
            model.paths(), writable=(staging,), device="cpu", protected=sandbox.protected
        )
        worker = Worker(sandbox, where, threads=options.threads, file_mb=CONVERT_FILE_MB)
        try:
            message = {
                "op": "convert",
                "gguf": str(model.gguf_file),
                "digest": model.gguf_digest,
                "out": str(staging),
            }
            worker.call(message, watch)
            _check_conversion(staging)
        except BaseException:
            (staging / MARKER).unlink(missing_ok=True)
            raise
        finally:
            worker.close()


def load_sandboxed(
    ref: str, options: BackendOptions, sandbox: Sandbox, watch: Watch = _no_watch
) -> SandboxedBackend:
    """Fetch ``ref`` here, then load it in a fresh sandboxed worker.

    The packages the worker needs are checked here first: the worker runs this Python,
    and a package missing here is this machine's setup error
    (``MissingDependencyError``), while anything the worker reports is the model's.
    """
    model = fetch_model(ref, options)
    on_llamacpp = on_llama_cpp(model, options)
    if on_llamacpp:  # the GGUF file as it is: nothing to convert
        _llama_lib.library()  # not installed, or not loadable here: this machine's setup
    else:
        require("torch", "transformers", extra="hf")
        if not model.converted:
            require("gguf", extra="gguf")
        if model.adapter is not None:
            require("peft", extra="hf")
    watch()
    if not on_llamacpp and not model.converted:
        convert_sandboxed(model, options, sandbox, watch)
    paths = model.paths(converted=not on_llamacpp)
    where = layout(paths, device=options.device, protected=sandbox.protected)
    worker = Worker(sandbox, where, threads=options.threads)
    try:
        message = {"op": "load", "model": model.to_json(), "options": _options_json(options)}
        info = protocol.decode_info(worker.call(message, watch))
    except BaseException:
        worker.kill()
        raise
    # What was fetched is known here; the worker does not get to say otherwise.
    backend = "llamacpp" if on_llamacpp else model.backend
    info = replace(info, ref=model.ref.canonical(), backend=backend, revision=model.revision)
    log.info("model %s loaded in a %s sandbox (pid %s)", ref, sandbox.tool, worker.process.pid)
    return SandboxedBackend(worker, info)
