"""The pinned transport: checked addresses only, connected to as checked, no redirects.

The servers here are real (threads on 127.0.0.1, one speaking TLS with a certificate
made for the test), so "the connection went to the checked address" is shown by a
socket, not by a mock: names such as ``qb-pinned.invalid`` cannot resolve through the
system's DNS, so a request to one only succeeds when the transport connected to the
address our resolver gave.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from quorumbench.errors import DataUrlNotAllowedError, EndpointNotAllowedError
from quorumbench.evaluation.endpoints import PinnedTransport, pinned_transport

TLS_NAME = "qb-tls.test"


@dataclass
class Server:
    port: int
    hosts: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.hosts.append(self.headers.get("Host", ""))
            server.paths.append(self.path)
            if self.path.startswith("/redirect"):
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{server.port}/internal")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler


def _serve(context: ssl.SSLContext | None = None) -> Iterator[Server]:
    server = Server(port=0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server.port = httpd.server_address[1]
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def http_server() -> Iterator[Server]:
    yield from _serve()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for ``qb-tls.test`` only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[Server]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    yield from _serve(context)


class Resolver:
    """Answers from a script, one answer per call (the last one repeats); counts calls."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        index = min(len(self.calls), len(self.answers)) - 1
        return self.answers[index]


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} needed no DNS lookup")


def get(transport: httpx.AsyncBaseTransport, url: str) -> httpx.Response:
    async def main() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, timeout=10) as client:
            return await client.get(url)

    return asyncio.run(main())


class Recorder(httpx.AsyncBaseTransport):
    """An inner transport that records the pinned requests and answers ``status``."""

    def __init__(self, status: int = 200, location: str | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.status = status
        self.location = location

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        headers = {"location": self.location} if self.location else {}
        return httpx.Response(self.status, headers=headers, json={"ok": True})


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "address", "why"),
    [
        ("http://127.0.0.1:8080/v1/models", "127.0.0.1", "a loopback address"),
        ("http://10.0.0.1/v1/models", "10.0.0.1", "a private address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "a cloud metadata"),
        ("http://[::1]:8080/v1/models", "::1", "a loopback address"),
        ("https://[fe80::1]/v1", "fe80::1", "a link-local address"),
        ("http://100.100.100.200/", "100.100.100.200", "a cloud metadata"),
    ],
)
def test_blocked_literal_addresses_are_refused_before_connecting(url, address, why):
    inner = Recorder()
    transport = PinnedTransport(allow_private=False, resolve=no_dns, inner=inner)
    with pytest.raises(EndpointNotAllowedError) as caught:
        get(transport, url)
    assert f"resolves to {address}, {why}" in caught.value.message
    assert "must be reachable on the public internet" in caught.value.message
    assert inner.requests == []


def test_a_name_resolving_to_loopback_is_refused(http_server):
    resolve = Resolver(["127.0.0.1"])
    transport = pinned_transport(allow_private=False, resolve=resolve)
    with pytest.raises(EndpointNotAllowedError, match=r"loopy\.example resolves to 127\.0\.0\.1"):
        get(transport, f"http://loopy.example:{http_server.port}/v1/models")
    assert resolve.calls == ["loopy.example"]
    assert http_server.paths == []


def test_one_private_address_among_public_ones_refuses_the_name():
    inner = Recorder()
    transport = PinnedTransport(
        allow_private=False, resolve=Resolver(["8.8.8.8", "10.1.2.3"]), inner=inner
    )
    with pytest.raises(EndpointNotAllowedError, match=r"10\.1\.2\.3, a private address"):
        get(transport, "https://mixed.example/v1")
    assert inner.requests == []


def test_a_name_that_does_not_resolve_is_refused():
    def fail(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(EndpointNotAllowedError, match="does not resolve"):
        get(pinned_transport(allow_private=True, resolve=fail), "https://nowhere.invalid/v1")


@pytest.mark.parametrize("url", ["ftp://example.org/file", "file:///etc/passwd", "ws://x.org/"])
def test_schemes_other_than_http_are_refused(url):
    inner = Recorder()
    transport = PinnedTransport(allow_private=True, resolve=no_dns, inner=inner)

    async def send() -> None:
        await transport.handle_async_request(httpx.Request("GET", url))

    with pytest.raises(EndpointNotAllowedError, match=r"only http\(s\) URLs"):
        asyncio.run(send())
    assert inner.requests == []


def test_a_redirect_to_loopback_is_refused_not_followed(http_server):
    transport = pinned_transport(allow_private=True, resolve=no_dns)
    with pytest.raises(EndpointNotAllowedError) as caught:
        get(transport, f"http://127.0.0.1:{http_server.port}/redirect?token=abc")
    message = caught.value.message
    assert f"redirected (HTTP 302) to http://127.0.0.1:{http_server.port}/internal" in message
    assert "redirects are not followed" in message
    assert "token=abc" not in message
    assert http_server.paths == ["/redirect?token=abc"]  # /internal was never asked


def test_a_public_endpoint_redirecting_to_the_metadata_service_is_refused():
    inner = Recorder(status=307, location="http://169.254.169.254/latest/meta-data/iam")
    transport = PinnedTransport(
        allow_private=False, resolve=Resolver(["93.184.216.34"]), inner=inner
    )
    with pytest.raises(EndpointNotAllowedError, match=r"to http://169\.254\.169\.254/latest"):
        get(transport, "https://api.example.org/v1/models")
    assert len(inner.requests) == 1


def test_a_relative_redirect_names_the_absolute_target():
    inner = Recorder(status=301, location="/elsewhere?secret=1")
    transport = PinnedTransport(allow_private=False, resolve=Resolver(["8.8.8.8"]), inner=inner)
    with pytest.raises(EndpointNotAllowedError) as caught:
        get(transport, "https://user:pw@api.example.org/v1")
    assert "to https://api.example.org/elsewhere;" in caught.value.message
    assert "pw" not in caught.value.message and "secret" not in caught.value.message


def test_not_modified_is_no_redirect():
    inner = Recorder(status=304)
    transport = PinnedTransport(allow_private=False, resolve=Resolver(["8.8.8.8"]), inner=inner)
    assert get(transport, "https://api.example.org/v1").status_code == 304


def test_the_caller_chooses_the_error_type():
    transport = pinned_transport(allow_private=False, resolve=no_dns, error=DataUrlNotAllowedError)
    with pytest.raises(DataUrlNotAllowedError, match="loopback"):
        get(transport, "http://127.0.0.1/data.jsonl")


# -- what is allowed, and where the connection goes -------------------------------------


def test_loopback_is_allowed_when_private_addresses_are(http_server):
    response = get(
        pinned_transport(allow_private=True), f"http://127.0.0.1:{http_server.port}/v1/models"
    )
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert http_server.hosts == [f"127.0.0.1:{http_server.port}"]


def test_the_connection_goes_to_the_resolved_address_with_the_name_as_host(http_server):
    # The system's DNS cannot resolve .invalid: only our resolver's answer can connect.
    resolve = Resolver(["127.0.0.1"])
    transport = pinned_transport(allow_private=True, resolve=resolve)
    url = f"http://qb-pinned.invalid:{http_server.port}/v1/models?x=1"
    response = get(transport, url)
    assert response.status_code == 200
    assert str(response.request.url) == url  # the caller still sees its own URL
    assert http_server.hosts == [f"qb-pinned.invalid:{http_server.port}"]
    assert http_server.paths == ["/v1/models?x=1"]
    assert resolve.calls == ["qb-pinned.invalid"]


def test_a_changed_second_answer_does_not_matter(http_server):
    # Rebinding: the first answer is the one checked and the one connected to; a second
    # lookup (as a plain client would make when connecting) would get a dead address.
    resolve = Resolver(["127.0.0.1"], ["10.255.255.1"])
    transport = pinned_transport(allow_private=True, resolve=resolve)

    async def main() -> int:
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            first = await client.get(f"http://rebind.invalid:{http_server.port}/a")
            return first.status_code

    assert asyncio.run(main()) == 200
    assert resolve.calls == ["rebind.invalid"]  # one lookup for one request


def test_the_checked_answer_is_the_connected_one_under_rebinding():
    # The check sees a public address; the next lookup would say loopback. The inner
    # transport is asked for the public address, never the loopback one.
    inner = Recorder()
    resolve = Resolver(["93.184.216.34"], ["127.0.0.1"])
    transport = PinnedTransport(allow_private=False, resolve=resolve, inner=inner)
    assert get(transport, "https://rebind.example/v1/models").status_code == 200
    (sent,) = inner.requests
    assert sent.url.host == "93.184.216.34"
    assert sent.headers["host"] == "rebind.example"
    assert sent.extensions["sni_hostname"] == "rebind.example"
    # The next request resolves again, sees loopback, and is refused.
    with pytest.raises(EndpointNotAllowedError, match="127.0.0.1, a loopback address"):
        get(transport, "https://rebind.example/v1/models")
    assert len(inner.requests) == 1


def test_the_next_address_is_tried_when_the_first_refuses_the_connection(http_server):
    # The server listens on 127.0.0.1 only; 127.0.0.2 (also loopback) refuses.
    transport = pinned_transport(allow_private=True, resolve=Resolver(["127.0.0.2", "127.0.0.1"]))
    response = get(transport, f"http://two.invalid:{http_server.port}/v1")
    assert response.status_code == 200


def test_every_address_failing_is_a_connect_error(http_server):
    transport = pinned_transport(allow_private=True, resolve=Resolver(["127.0.0.2"]))
    with pytest.raises(httpx.ConnectError):
        get(transport, f"http://dead.invalid:{http_server.port}/v1")


def test_tls_is_verified_against_the_name_not_the_address(tls_server, certificate):
    trust = ssl.create_default_context(cafile=str(certificate[0]))
    transport = pinned_transport(allow_private=True, resolve=Resolver(["127.0.0.1"]), verify=trust)
    response = get(transport, f"https://{TLS_NAME}:{tls_server.port}/v1/models")
    assert response.status_code == 200
    assert tls_server.hosts == [f"{TLS_NAME}:{tls_server.port}"]
    # The same server under another name: its certificate does not match, so it fails.
    other = pinned_transport(allow_private=True, resolve=Resolver(["127.0.0.1"]), verify=trust)
    with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
        get(other, f"https://other.test:{tls_server.port}/v1/models")
    assert len(tls_server.hosts) == 1


def test_one_pool_per_name(tls_server, certificate):
    trust = ssl.create_default_context(cafile=str(certificate[0]))
    transport = PinnedTransport(allow_private=True, resolve=Resolver(["127.0.0.1"]), verify=trust)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            ok = await client.get(f"https://{TLS_NAME}:{tls_server.port}/a")
            assert ok.status_code == 200
            # Same address, another name: a new connection, verified for that name.
            with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
                await client.get(f"https://other.test:{tls_server.port}/b")

    asyncio.run(main())
    assert tls_server.paths == ["/a"]


def test_addresses_are_parsed_with_their_zone_dropped():
    inner = Recorder()
    transport = PinnedTransport(allow_private=True, resolve=Resolver(["fe80::1%eth0"]), inner=inner)
    get(transport, "http://zoned.invalid/v1")
    assert ipaddress.ip_address(inner.requests[0].url.host) == ipaddress.ip_address("fe80::1")
