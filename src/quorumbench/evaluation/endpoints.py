"""Which ``openai:`` endpoints may be called: public addresses only, unless allowed.

A registered ``openai:`` ref is called by every volunteer's runner, outside the
sandbox, and its registration is checked by the server. An endpoint that resolves to
a loopback, private, link-local, multicast, reserved or cloud-metadata address would
make each of them talk to something on its own machine or network (server-side
request forgery). :func:`check_endpoint` refuses such a URL; operators of private
deployments and tests turn it off (``QB_ALLOW_PRIVATE_ENDPOINTS``,
``QB_RUNNER_ALLOW_PRIVATE_ENDPOINTS``).

:func:`check_endpoint` resolves the host name once, before anything connects: a name
whose DNS answer changes between that check and the connection (DNS rebinding) is not
caught by it alone. :func:`pinned_transport` closes that gap for the connections made
through it: each request's host is resolved and checked, and the connection goes to
the checked address (the ``Host`` header and, over https, the TLS server name and
certificate check keep the original name). It never follows a redirect.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from functools import cache
from urllib.parse import urlsplit

import anyio.to_thread
import httpx

from quorumbench.errors import EndpointNotAllowedError, QuorumError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Iterable[str]]

METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    }
)
"""Cloud instance-metadata services (credentials live there)."""

_SHARED = ipaddress.ip_network("100.64.0.0/10")
"""Carrier-grade NAT space: not globally routable, not flagged private by ipaddress."""


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def blocked_reason(address: Address) -> str | None:
    """Why a connection to ``address`` is refused, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return blocked_reason(address.ipv4_mapped)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_unspecified, "the unspecified address"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "a shared address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    )
    return next((why for flagged, why in checks if flagged), None)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None


def _resolved(
    url: str, host: str, port: int, resolve: Resolver, error: type[QuorumError]
) -> list[Address]:
    """The addresses ``host`` resolves to (itself when it is an address literal)."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        found = [ipaddress.ip_address(a.split("%")[0]) for a in resolve(host, port)]
    except (OSError, UnicodeError, ValueError) as exc:
        raise error(
            f"{url}: the host {host!r} does not resolve ({exc}), so it cannot be checked"
        ) from None
    if not found:
        raise error(f"{url}: the host {host!r} resolves to no address")
    return found


def _refuse_blocked(
    url: str, host: str, found: Iterable[Address], error: type[QuorumError], what: str
) -> None:
    for address in found:
        why = blocked_reason(address)
        if why is not None:
            raise error(
                f"{url}: {host} resolves to {address}, {why}; {what} must be reachable "
                f"on the public internet (an operator may allow private {what})"
            )


def check_endpoint(
    url: str,
    *,
    allow_private: bool,
    resolve: Resolver = _resolve,
    error: type[QuorumError] = EndpointNotAllowedError,
    what: str = "endpoints",
) -> None:
    """Refuse ``url`` unless every address its host resolves to is public.

    Raises ``error`` (:class:`EndpointNotAllowedError`; the data fetcher passes its own)
    naming the address and why; a host that does not resolve is refused too (it cannot
    be checked). ``allow_private`` skips every check. ``what`` names the URLs in the
    message ("endpoints", "data URLs").
    """
    if allow_private:
        return
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise error(f"{url}: an http(s) URL with a host is needed")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise error(f"{url}: {exc}") from None
    _refuse_blocked(url, host, _resolved(url, host, port, resolve, error), error, what)


def _shown(url: httpx.URL) -> str:
    """``url`` as an error message shows it: no user info, query or fragment."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}{port}{url.path}"


def _ascii_host(url: httpx.URL) -> str:
    """The URL's host as DNS and TLS see it (IDNA-encoded, no brackets)."""
    return url.raw_host.decode("ascii")


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that connects only to addresses it has checked.

    For each request: the scheme must be http or https; the URL's host is resolved
    (once, in a worker thread) and, unless ``allow_private``, every address must be
    public (:func:`blocked_reason`); the request then goes to the first address (the
    next on a connection failure) with the URL's host replaced by that address, so no
    second DNS lookup happens. The ``Host`` header keeps the name and, over https, the
    name is the TLS server name (SNI) the certificate is verified against. A redirect
    (3xx with a ``Location``) is refused, never followed. Refusals raise ``error``
    naming the URL (without user info or query), the address and why.

    One connection pool is kept per scheme and host name, so a TLS connection verified
    for one name never carries a request for another name on the same address. The
    pools belong to one event loop: use :meth:`fresh` for another, and close the
    transport (``aclose``, or the client that owns it) when done.

    Args:
        allow_private: Connect to loopback, private, link-local and metadata addresses
            too (tests, private deployments); the connection is still pinned.
        resolve: ``(host, port) -> addresses``; blocking, run in a worker thread.
        error: The error type raised on a refusal.
        verify: TLS verification for the default inner transports (``True``, or an
            :class:`ssl.SSLContext`, e.g. one trusting a test's certificate).
        inner: One transport to send every pinned request through instead of a pool
            per host (tests record what it receives); never closed here.
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        resolve: Resolver = _resolve,
        error: type[QuorumError] = EndpointNotAllowedError,
        verify: ssl.SSLContext | bool = True,
        inner: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._resolve = resolve
        self._error = error
        self._verify = verify
        self._inner = inner
        self._pools: dict[tuple[str, str], httpx.AsyncHTTPTransport] = {}

    def fresh(self) -> PinnedTransport:
        """A transport with the same rules and no connections yet: pooled connections
        belong to the event loop that opened them, so each loop needs its own."""
        return PinnedTransport(
            allow_private=self._allow_private,
            resolve=self._resolve,
            error=self._error,
            verify=self._verify,
            inner=self._inner,
        )

    def _pool(self, scheme: str, host: str) -> httpx.AsyncBaseTransport:
        if self._inner is not None:
            return self._inner
        key = (scheme, host)
        if key not in self._pools:
            verify = default_tls() if self._verify is True else self._verify
            self._pools[key] = httpx.AsyncHTTPTransport(verify=verify)
        return self._pools[key]

    async def _addresses(self, url: httpx.URL) -> list[Address]:
        shown = _shown(url)
        if url.scheme not in ("http", "https") or not url.host:
            raise self._error(f"{shown}: only http(s) URLs with a host are allowed")
        host = _ascii_host(url)
        port = url.port or (443 if url.scheme == "https" else 80)
        if _literal(host) is not None:
            found = _resolved(shown, host, port, self._resolve, self._error)
        else:
            found = await anyio.to_thread.run_sync(
                _resolved, shown, host, port, self._resolve, self._error
            )
        if not self._allow_private:
            _refuse_blocked(shown, host, found, self._error, "endpoints")
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        found = await self._addresses(url)
        host = _ascii_host(url)
        extensions = dict(request.extensions)
        if url.scheme == "https" and _literal(host) is None:
            extensions["sni_hostname"] = host
        pool = self._pool(url.scheme, host)
        failure: httpx.ConnectError | None = None
        for address in found:
            pinned = httpx.Request(
                request.method,
                url.copy_with(host=str(address)),
                headers=request.headers,  # holds Host: the original name
                stream=request.stream,
                extensions=extensions,
            )
            try:
                response = await pool.handle_async_request(pinned)
            except httpx.ConnectError as exc:
                failure = exc
                continue
            await self._refuse_redirect(url, response)
            return response
        assert failure is not None
        raise failure

    async def _refuse_redirect(self, url: httpx.URL, response: httpx.Response) -> None:
        location = response.headers.get("location")
        if not 300 <= response.status_code < 400 or location is None:
            return
        await response.aclose()
        try:
            target = _shown(url.join(location))
        except (httpx.InvalidURL, ValueError):
            target = "an invalid URL"
        raise self._error(
            f"{_shown(url)}: the endpoint redirected (HTTP {response.status_code}) to "
            f"{target}; redirects are not followed"
        )

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


@cache
def default_tls() -> ssl.SSLContext:
    """httpx's verifying TLS context (certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    when set), made once per process and shared by every transport: making one reads the
    whole CA bundle (37 ms measured), and the live asks open a transport per request."""
    return httpx.create_ssl_context()


def pinned_transport(
    *,
    allow_private: bool,
    resolve: Resolver = _resolve,
    error: type[QuorumError] = EndpointNotAllowedError,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncBaseTransport:
    """An httpx async transport that resolves each request's host, refuses blocked
    addresses (unless ``allow_private``), connects at the checked address and refuses
    redirects: see :class:`PinnedTransport`."""
    return PinnedTransport(allow_private=allow_private, resolve=resolve, error=error, verify=verify)
