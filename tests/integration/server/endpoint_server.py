"""A tiny OpenAI-compatible server for the ask tests: no model, real HTTP on loopback.

It checks ``Authorization: Bearer <key>`` (401 otherwise), lists one model, refuses
``/v1/completions`` (404: the backend then falls back to letter-choice prompts for
multiple choice) and answers every ``/v1/chat/completions`` with ``reply``. ``gate``
(an Event), when set, holds every chat answer until it is set: a job that stays
STARTED for as long as a test needs. It records the paths it was asked, whether each
request carried the right key (never the key itself) and when each chat request came
(``time.monotonic()``, for the pace the server keeps).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Endpoint:
    key: str | None
    reply: str = "7"
    gate: threading.Event | None = None
    seen: list[tuple[str, bool]] = field(default_factory=list)
    chat_times: list[float] = field(default_factory=list)
    url: str = ""

    def chat_calls(self) -> int:
        return sum(1 for path, _ in self.seen if path.endswith("/chat/completions"))


class _Handler(BaseHTTPRequestHandler):
    endpoint: Endpoint

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        ep = self.endpoint
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if method == "POST" else {}
        authorized = ep.key is None or self.headers.get("Authorization") == f"Bearer {ep.key}"
        ep.seen.append((self.path, authorized))
        if not authorized:
            self._answer(401, {"error": {"message": "invalid api key", "type": "auth"}})
        elif self.path == "/v1/models":
            self._answer(200, {"object": "list", "data": [{"id": "mine", "object": "model"}]})
        elif self.path == "/v1/chat/completions":
            ep.chat_times.append(time.monotonic())
            if ep.gate is not None:
                ep.gate.wait(timeout=60)
            self._answer(
                200,
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": ep.reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "model": body.get("model"),
                    "usage": {"completion_tokens": 1},
                },
            )
        else:
            self._answer(404, {"error": {"message": f"no {self.path}"}})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


@contextmanager
def serve_endpoint(key: str | None, **options: Any) -> Iterator[Endpoint]:
    endpoint = Endpoint(key, **options)
    handler = type("Handler", (_Handler,), {"endpoint": endpoint})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield endpoint
    finally:
        if endpoint.gate is not None:
            endpoint.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
