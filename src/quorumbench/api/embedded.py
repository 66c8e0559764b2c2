"""The app served by uvicorn in a background thread of this process.

``quorumbench demo`` and the end-to-end tests use it: the same app and server as
``quorumbench serve``, on a socket bound before the thread starts (so port 0 picks a
free port and the URL is known at once).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from quorumbench.errors import ConfigError


class EmbeddedServer:
    """Serve ``app`` on ``host:port`` in a daemon thread; a context manager."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            self.sock.close()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        bound_port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{bound_port}"
        config = uvicorn.Config(app, log_level="warning", ws="none", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self.sock]},
            name="quorumbench-server",
            daemon=True,
        )

    @property
    def context(self) -> Any:
        """The app's ServerContext (set by the lifespan once started)."""
        return self.app.state.context

    def start(self, timeout: float = 60.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the embedded server stopped during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded server did not start in {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=timeout)
        self.sock.close()

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
