"""Which ``openai:`` endpoints may be called: public addresses only, unless allowed.

A registered ``openai:`` ref is called by every volunteer's runner, outside the
sandbox, and its registration is checked by the server. An endpoint that resolves to
a loopback, private, link-local, multicast, reserved or cloud-metadata address would
make each of them talk to something on its own machine or network (server-side
request forgery). :func:`check_endpoint` refuses such a URL; operators of private
deployments and tests turn it off (``QB_ALLOW_PRIVATE_ENDPOINTS``,
``QB_RUNNER_ALLOW_PRIVATE_ENDPOINTS``).

The check resolves the host name once. A name whose DNS answer changes between this
check and the connection (DNS rebinding) is not caught here; docs/security.md says so.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

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
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    try:
        found = (
            [literal]
            if literal is not None
            else [ipaddress.ip_address(a.split("%")[0]) for a in resolve(host, port)]
        )
    except (OSError, UnicodeError) as exc:
        raise error(
            f"{url}: the host {host!r} does not resolve ({exc}), so it cannot be checked"
        ) from None
    if not found:
        raise error(f"{url}: the host {host!r} resolves to no address")
    for address in found:
        why = blocked_reason(address)
        if why is not None:
            raise error(
                f"{url}: {host} resolves to {address}, {why}; {what} must be reachable "
                f"on the public internet (an operator may allow private {what})"
            )


def pinned_transport(*, allow_private: bool, resolve: Resolver = _resolve) -> Any:
    """CONTRACT STUB (issue 16): an httpx async transport that resolves each request's
    host, refuses blocked addresses (unless ``allow_private``) and connects at the
    checked address. The endpoint helper replaces this body."""
    import httpx

    if allow_private:
        return httpx.AsyncHTTPTransport()
    raise NotImplementedError("pinned_transport: issue 16 helper")
