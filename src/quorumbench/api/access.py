"""The optional access log (``--access-log``): one ``http.request`` event per request."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quorumbench.logs import event

log = logging.getLogger("quorumbench.access")


class AccessLog:
    """Logs method, path, status, duration and client of every HTTP request (never the
    query string or headers: tokens and OAuth codes travel there)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            event(
                log,
                "http.request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                ms=round((time.perf_counter() - started) * 1000, 1),
                client=f"{client[0]}:{client[1]}" if client else None,
            )
