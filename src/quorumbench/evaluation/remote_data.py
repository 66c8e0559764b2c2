"""Benchmark data at a URL: fetched once, size-limited, pinned by SHA-256, cached.

A custom spec's ``data.url`` (``https://…`` or ``hf://datasets/<repo>@<commit>/<path>``)
is read by the server when the benchmark is created (to validate it) and by every
runner that evaluates it; both check the bytes against the spec's SHA-256 and keep
them in a cache directory under the SHA-256, so the next load reads the disk.

Fetching is guarded against server-side request forgery: before every request (the
first and each redirect, followed here one at a time) the host is resolved and
refused when any address is loopback, private, link-local, multicast, reserved,
unspecified or a cloud metadata address (``evaluation/endpoints.py``), and plain
``http://`` is refused, unless ``allow_private`` (private deployments and tests). The
body is streamed and cut off past ``max_bytes``. The name is resolved again by the
connection itself, so a DNS answer that changes in between (rebinding) is not caught
here (docs/security.md).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

from quorumbench.errors import (
    ChecksumMismatchError,
    DataTooLargeError,
    DataUnreachableError,
    DataUrlNotAllowedError,
)
from quorumbench.evaluation.endpoints import Resolver, check_endpoint
from quorumbench.evaluation.spec import download_url

MAX_REDIRECTS = 5
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class FetchPolicy:
    """How data URLs may be fetched: the size limit, whether private addresses (and
    plain http) are allowed, the timeout; ``transport`` and ``resolve`` are for tests."""

    max_bytes: int = DEFAULT_MAX_BYTES
    allow_private: bool = False
    timeout_s: float = 30.0
    transport: httpx.BaseTransport | None = None
    resolve: Resolver | None = None


def _check(url: str, policy: FetchPolicy) -> None:
    scheme = urlsplit(url).scheme
    if scheme != "https" and not (policy.allow_private and scheme == "http"):
        raise DataUrlNotAllowedError(
            f"{url}: data URLs must be https:// (plain http only where the operator "
            "allows private URLs)"
        )
    if policy.resolve is None:
        check_endpoint(
            url, allow_private=policy.allow_private, error=DataUrlNotAllowedError, what="data URLs"
        )
    else:
        check_endpoint(
            url,
            allow_private=policy.allow_private,
            resolve=policy.resolve,
            error=DataUrlNotAllowedError,
            what="data URLs",
        )


def _download(url: str, policy: FetchPolicy) -> bytes:
    timeout = httpx.Timeout(policy.timeout_s)
    with httpx.Client(
        transport=policy.transport, timeout=timeout, follow_redirects=False, trust_env=False
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            _check(url, policy)
            try:
                with client.stream("GET", url) as answer:
                    if answer.is_redirect:
                        target = answer.headers.get("location")
                        if not target:
                            raise DataUnreachableError(f"{url}: a redirect without a Location")
                        url = urljoin(url, target)
                        continue
                    if answer.status_code != 200:
                        raise DataUnreachableError(
                            f"{url}: the server answered HTTP {answer.status_code}"
                        )
                    declared = answer.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > policy.max_bytes:
                        raise DataTooLargeError(_too_large(url, policy.max_bytes))
                    body = bytearray()
                    for chunk in answer.iter_bytes(_CHUNK):
                        body += chunk
                        if len(body) > policy.max_bytes:
                            raise DataTooLargeError(_too_large(url, policy.max_bytes))
                    return bytes(body)
            except httpx.HTTPError as exc:
                raise DataUnreachableError(f"{url}: cannot fetch it: {exc or type(exc)}") from exc
    raise DataUnreachableError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _too_large(url: str, limit: int) -> str:
    return f"{url}: the data is larger than the limit of {limit} bytes"


def _cached(path: Path, sha256: str) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() == sha256:
        return data
    path.unlink(missing_ok=True)  # damaged: fetched again
    return None


def _cache_path(cache_dir: Path, sha256: str) -> Path:
    return cache_dir / f"{sha256}.data"


def keep_in_cache(cache_dir: Path, sha256: str, data: bytes) -> None:
    """Write verified ``data`` to ``cache_dir`` under its SHA-256 (atomically)."""
    path = _cache_path(cache_dir, sha256)
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=cache_dir, prefix=".part-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def fetch_verified(
    url: str, sha256: str, policy: FetchPolicy, cache_dir: Path | None = None
) -> bytes:
    """The bytes at ``url`` (``https://`` or ``hf://datasets/…``), which must hash to
    ``sha256``: from ``cache_dir`` when it holds them, else fetched (see the module
    docstring) and kept there. Raises DataUrlNotAllowedError, DataUnreachableError,
    DataTooLargeError or ChecksumMismatchError."""
    if cache_dir is not None:
        found = _cached(_cache_path(cache_dir, sha256), sha256)
        if found is not None:
            return found
    data = _download(download_url(url), policy)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ChecksumMismatchError(f"{url}: the data has SHA-256 {actual}, the spec pins {sha256}")
    if cache_dir is not None:
        keep_in_cache(cache_dir, sha256, data)
    return data
