"""The OpenAI-compatible backend through the pinned transport, against a real socket."""

from __future__ import annotations

import gc
import json
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.openai_compat import OpenAICompatBackend
from quorumbench.errors import EndpointNotAllowedError
from quorumbench.evaluation.backend import ChatMessage, GenerateRequest, Prompt
from quorumbench.evaluation.endpoints import pinned_transport
from quorumbench.evaluation.refs import parse_ref

KEY = "sk-pinned-SECRET-55aa"


@pytest.fixture
def server() -> Iterator[tuple[int, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: connections stay pooled

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            seen.append({"host": self.headers["Host"], "auth": self.headers["Authorization"]})
            if self.path.endswith("/moved/chat/completions"):
                self.send_response(301)
                self.send_header("Location", "http://10.0.0.1/v1/chat/completions")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps(
                {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def request() -> GenerateRequest:
    return GenerateRequest(Prompt(messages=(ChatMessage("user", "2+2?"),)), max_new_tokens=4)


def backend_for(port: int, path: str = "v1") -> OpenAICompatBackend:
    transport = pinned_transport(
        allow_private=True, resolve=lambda host, p: ["127.0.0.1"]
    )  # the name resolves only through this resolver
    return OpenAICompatBackend(
        parse_ref(f"openai:http://my-model.invalid:{port}/{path}#m"),
        BackendOptions(api_key=SecretStr(KEY), max_retries=0, timeout_s=10),
        transport=transport,
    )


def test_calls_in_separate_event_loops_work_and_leave_no_socket_open(server):
    port, seen = server
    backend = backend_for(port)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for _ in range(3):  # each call is its own asyncio.run
            [result] = backend.generate([request(), request()][:1], batch_size=1)
            assert result.text == "4"
        gc.collect()
    assert seen == [{"host": f"my-model.invalid:{port}", "auth": f"Bearer {KEY}"}] * 3


def test_a_redirect_through_the_pinned_transport_is_refused_without_the_key(server):
    port, seen = server
    with pytest.raises(EndpointNotAllowedError) as caught:
        backend_for(port, "moved").generate([request()], batch_size=1)
    message = caught.value.message
    assert "redirected (HTTP 301) to http://10.0.0.1/v1/chat/completions" in message
    assert "SECRET" not in message and len(seen) == 1
