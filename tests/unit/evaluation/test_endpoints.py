"""The openai: endpoint check: public addresses pass, everything local is refused."""

from __future__ import annotations

import ipaddress

import pytest

from quorumbench.errors import EndpointNotAllowedError, ModelLoadError
from quorumbench.evaluation.endpoints import blocked_reason, check_endpoint


def resolver(*addresses: str):
    def resolve(host: str, port: int) -> list[str]:
        return list(addresses)

    return resolve


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "address"),  # reserved (Python also calls it private)
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("192.0.2.1", "private"),  # documentation range: not public either
    ],
)
def test_local_addresses_are_refused(address, why):
    reason = blocked_reason(ipaddress.ip_address(address))
    assert reason is not None and why in reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"])
def test_public_addresses_pass(address):
    assert blocked_reason(ipaddress.ip_address(address)) is None
    check_endpoint("https://api.example.org/v1", allow_private=False, resolve=resolver(address))


def test_a_literal_loopback_url_is_refused_without_resolving():
    def boom(host, port):
        raise AssertionError("a literal address needs no DNS")

    with pytest.raises(EndpointNotAllowedError, match=r"127\.0\.0\.1, a loopback address"):
        check_endpoint("http://127.0.0.1:8080/v1", allow_private=False, resolve=boom)
    with pytest.raises(EndpointNotAllowedError, match="loopback"):
        check_endpoint("http://[::1]:8080/v1", allow_private=False, resolve=boom)


def test_one_private_answer_among_public_ones_is_enough_to_refuse():
    with pytest.raises(EndpointNotAllowedError, match=r"10\.0\.0\.5"):
        check_endpoint(
            "https://mixed.example/v1",
            allow_private=False,
            resolve=resolver("8.8.8.8", "10.0.0.5"),
        )


def test_localhost_by_name_is_refused():
    with pytest.raises(EndpointNotAllowedError, match="loopback"):
        check_endpoint("http://localhost:9/v1", allow_private=False)


def test_a_host_that_does_not_resolve_is_refused():
    def fail(host, port):
        raise OSError("Name or service not known")

    with pytest.raises(EndpointNotAllowedError, match="does not resolve"):
        check_endpoint("https://nowhere.invalid/v1", allow_private=False, resolve=fail)


@pytest.mark.parametrize("url", ["ftp://example.org/", "http:///v1", "example.org/v1"])
def test_urls_without_an_http_host_are_refused(url):
    with pytest.raises(EndpointNotAllowedError, match="http"):
        check_endpoint(url, allow_private=False, resolve=resolver("8.8.8.8"))


def test_allow_private_turns_the_check_off():
    check_endpoint("http://127.0.0.1:1/v1", allow_private=True)


def test_the_refusal_is_a_model_load_error():
    assert issubclass(EndpointNotAllowedError, ModelLoadError)
