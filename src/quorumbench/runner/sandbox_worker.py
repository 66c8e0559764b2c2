"""The sandboxed worker: loads one model and answers the runner over stdin/stdout.

Started by :class:`quorumbench.runner.worker.Worker` inside a sandbox with the
bootstrap :data:`BOOT` (``python -I -B -c BOOT <config json>``). In order, before
any model code can run, it:

1. builds its own root when the sandbox is the ``unshare`` fallback
   (:mod:`quorumbench.runner._jail`), then executes itself again without
   capabilities;
2. sets its limits: address space, processes, file size, no core dumps;
3. keeps stdout for the protocol and sends everything else printed to stderr.

Then it reads one operation per line (see :mod:`quorumbench.runner.protocol`) until
stdin closes. Only the standard library is imported at module level.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

BOOT = (
    "import json, sys; config = json.loads(sys.argv[1]); sys.path[:] = config['path']; "
    "from quorumbench.runner.sandbox_worker import main; sys.exit(main(config))"
)
MAX_ERROR_CHARS = 2000


def _set_limits(limits: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    pairs = (
        (resource.RLIMIT_AS, limits.get("memory_bytes")),
        (resource.RLIMIT_NPROC, limits.get("processes")),
        (resource.RLIMIT_FSIZE, limits.get("file_bytes")),
    )
    for which, value in pairs:
        if value is not None:
            resource.setrlimit(which, (int(value), int(value)))


class _Channel:
    """The protocol stream: the original stdout, kept apart from anything printed."""

    def __init__(self) -> None:
        self.out: IO[str] = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # print() and library chatter go to stderr from now on

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def progress(self, n: int) -> None:
        self.send({"event": "progress", "n": n})


class _Worker:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel
        self.backend: Any = None
        self.usage: dict[str, Any] = {}

    def load(self, message: dict[str, Any]) -> Any:
        from quorumbench.backends import BackendOptions
        from quorumbench.backends.local import LocalModel, load_local, on_llama_cpp
        from quorumbench.runner.protocol import encode_info

        model = LocalModel.from_json(message["model"])
        options = BackendOptions(**message["options"])
        if not model.converted and not on_llama_cpp(model, options):
            raise RuntimeError("the runner sent a GGUF model that is not converted yet")
        self.backend = load_local(model, options)
        return encode_info(self.backend.info)

    def convert(self, message: dict[str, Any]) -> Any:
        from pathlib import Path

        from quorumbench.backends.gguf import convert_into

        convert_into(Path(message["gguf"]), str(message["digest"]), Path(message["out"]))
        return None

    def generate(self, message: dict[str, Any]) -> Any:
        from quorumbench.runner.protocol import decode_generate, encode_generate_result

        requests = [decode_generate(r) for r in message["requests"]]
        with self._measured(message):
            results = self.backend.generate(
                requests, batch_size=int(message["batch_size"]), progress=self.channel.progress
            )
        return [encode_generate_result(r) for r in results]

    def choose(self, message: dict[str, Any]) -> Any:
        from quorumbench.runner.protocol import decode_choice, encode_choice_result

        requests = [decode_choice(r) for r in message["requests"]]
        with self._measured(message):
            results = self.backend.choose(
                requests, batch_size=int(message["batch_size"]), progress=self.channel.progress
            )
        return [encode_choice_result(r) for r in results]

    @contextlib.contextmanager
    def _measured(self, message: dict[str, Any]) -> Iterator[None]:
        """Measure the operation when the runner asks (``"measure": true``); the
        ``usage`` operation then hands the figures back."""
        self.usage = {}
        if not message.get("measure"):
            yield
            return
        from quorumbench.evaluation.measure import Measurer

        with Measurer(str(self.backend.info.device), energy=False) as measurer:
            yield
        self.usage = measurer.usage_for_parent()

    def take_usage(self, message: dict[str, Any]) -> Any:
        usage, self.usage = self.usage, {}
        return usage

    def count_tokens(self, message: dict[str, Any]) -> Any:
        return int(self.backend.count_tokens(str(message["text"])))

    def handle(self, message: dict[str, Any]) -> Any:
        operations: dict[str, Callable[[dict[str, Any]], Any]] = {
            "load": self.load,
            "convert": self.convert,
            "generate": self.generate,
            "choose": self.choose,
            "count_tokens": self.count_tokens,
            "usage": self.take_usage,
        }
        op = message.get("op")
        if op not in operations:
            raise ValueError(f"unknown operation {op!r}")
        if op in ("generate", "choose", "count_tokens") and self.backend is None:
            raise RuntimeError("no model is loaded")
        return operations[str(op)](message)


def main(config: dict[str, Any]) -> int:
    """Run the worker (see the module docstring); the exit status."""
    if config.get("jail"):
        from quorumbench.runner._jail import enter

        enter(config["jail"])
        config = {**config, "jail": None}
        os.execv(sys.executable, [sys.executable, "-I", "-B", "-c", BOOT, json.dumps(config)])
    _set_limits(config["limits"])
    os.makedirs(os.environ.get("HOME", "/tmp/home"), exist_ok=True)
    channel = _Channel()
    worker = _Worker(channel)
    channel.send({"event": "ready"})
    for line in sys.stdin:
        try:
            value = worker.handle(json.loads(line))
        except BaseException as exc:  # everything goes back to the runner, then on
            text = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            channel.send({"event": "error", "type": type(exc).__name__, "message": text})
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                return 1
            continue
        channel.send({"event": "done", "value": value})
    return 0
