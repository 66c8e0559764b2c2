"""HTTP plumbing of the OpenAI-compatible backend: sessions, error texts, Retry-After.

Split from :mod:`quorumbench.backends.openai_compat`, which holds the API calls; the
helpers here know nothing about completions. Every text that may end up in an error
goes through :func:`sanitize`, so the API key never leaves in a message.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from quorumbench.errors import EndpointError

T = TypeVar("T")
Json = dict[str, Any]

_MAX_DETAIL = 200


class Transient(Exception):
    """A failure worth retrying (network error, timeout, 429, 5xx, a broken stream)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


async def in_order(coros: Sequence[Awaitable[T]]) -> list[T]:
    """Await all, results in order; on the first failure cancel the rest and re-raise."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class Session:
    """One sync call's client and its concurrency limit."""

    client: httpx.AsyncClient
    limit: asyncio.Semaphore


class KeepOpen(httpx.AsyncBaseTransport):
    """Lends an injected transport to a client without letting the client close it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None


def public_url(url: str) -> str:
    """``url`` without user info, query string or fragment (they may carry tokens)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}"


def sanitize(text: str, secret: str | None) -> str:
    """A short, single-line, printable version of ``text`` with ``secret`` masked."""
    if secret:
        text = text.replace(secret, "***")
    text = re.sub(r"(?i)bearer\s+\S+", "Bearer ***", text)
    text = re.sub(r"\bsk-[\w-]{4,}", "sk-***", text)
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def error_detail(response: httpx.Response) -> str:
    """The message of an error answer (OpenAI's ``error.message`` and its variants)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:1000]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(error.get(key), str):
                    return str(error[key])
        if isinstance(error, str):
            return error
        if isinstance(body.get("detail"), str):
            return str(body["detail"])
    return str(body)[:1000]


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms`` or ``Retry-After``)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def decode_answer(response: httpx.Response, where: str, secret: str | None) -> Json:
    """The JSON object of a 2xx answer from ``where`` (a public URL), or EndpointError:
    for a redirect (never followed), another status, or a body that is no JSON object."""
    status = response.status_code
    location = response.headers.get("location")
    if 300 <= status < 400 and location is not None:
        target = public_url(str(response.url.join(location)))
        raise EndpointError(
            f"{where} redirected (HTTP {status}) to {sanitize(target, None)}; "
            "redirects are not followed (use the final URL as the endpoint)",
            status,
        )
    if not 200 <= status < 300:
        detail = sanitize(error_detail(response), secret)
        raise EndpointError(f"{where} answered HTTP {status}: {detail}", status)
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise EndpointError(f"{where} did not answer with a JSON object")
    return data
