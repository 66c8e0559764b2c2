"""Registration refusals for owners: endpoints on private addresses (SSRF), the quota
(403 with what is owed) and the weekly limit (429 with a correct Retry-After)."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth

HOSTS = {
    "localhost": ["127.0.0.1", "::1"],
    "llm.example.org": ["93.184.216.34"],
    "v6.example.org": ["2606:2800:220:1:248:1893:25c8:1946"],
    "split.example.org": ["93.184.216.34", "10.1.2.3"],  # one public, one private answer
}
"""What the fake DNS answers; any other name does not resolve (no network here)."""


def _fake_getaddrinfo(host, port, *args, **kwargs):
    if host not in HOSTS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [
        (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
        for a in HOSTS[host]
    ]


@pytest.fixture
def registrar(make_ctx, tmp_path, monkeypatch):
    """``make(**settings)``: a client and tokens (admin, owner), and the refs inspected."""
    monkeypatch.setattr(socket, "getaddrinfo", _fake_getaddrinfo)
    inspected: list[str] = []
    clients = []

    def make(**overrides):
        ctx = make_ctx(f"sqlite:///{tmp_path / f'reg{len(clients)}.db'}", **overrides)
        ctx.inspector = lambda ref: inspected.append(ref) or fake_metadata(ref)
        create_account(ctx, "admin", is_admin=True)
        create_account(ctx, "owner")
        tokens = {
            "admin": issue_token(ctx, "admin", scopes=("admin",)).token,
            "owner": issue_token(ctx, "owner").token,
        }
        client = TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False))
        clients.append(client.__enter__())
        return client, tokens, ctx

    yield make, inspected
    for client in clients:
        client.__exit__(None, None, None)


def _register(client, token, ref):
    return client.post("/v0/models", json={"ref": ref}, headers=auth(token))


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("openai:http://127.0.0.1:9/v1#m", "127.0.0.1, a loopback address"),
        ("openai:http://[::1]:8000/v1#m", "::1, a loopback address"),
        ("openai:http://169.254.169.254/latest#m", "a cloud metadata address"),
        ("openai:http://10.0.0.1/v1#m", "10.0.0.1, a private address"),
        ("openai:http://localhost:8000/v1#m", "localhost resolves to 127.0.0.1, a loopback"),
        ("openai:https://split.example.org/v1#m", "10.1.2.3, a private address"),
        ("openai:http://nowhere.invalid/v1#m", "does not resolve"),
    ],
)
def test_endpoints_on_non_public_addresses_are_refused_before_any_inspection(registrar, ref, says):
    make, inspected = registrar
    client, tokens, _ = make()
    for who in ("owner", "admin"):  # an admin's typo would point every runner at itself too
        assert_problem(_register(client, tokens[who], ref), 422, "endpoint-not-allowed", says)
    assert inspected == []
    assert client.get("/v0/models").json() == []


def test_public_endpoints_pass_the_check(registrar):
    make, inspected = registrar
    client, tokens, _ = make()
    for n, host in enumerate(("llm.example.org", "v6.example.org", "93.184.216.34")):
        ref = f"openai:https://{host}/v1#model-{n}"
        assert _register(client, tokens["owner"], ref).status_code == 201, ref
    assert len(inspected) == 3


def test_private_endpoints_are_allowed_with_the_operator_setting(registrar):
    make, inspected = registrar
    client, tokens, ctx = make(allow_private_endpoints=True)
    assert ctx.settings.allow_private_endpoints
    answer = _register(client, tokens["owner"], "openai:http://127.0.0.1:9/v1#m")
    assert answer.status_code == 201, answer.text
    assert inspected == ["openai:http://127.0.0.1:9/v1#m"]


def test_the_quota_refusal_is_403_and_says_what_is_owed(registrar):
    make, _ = registrar
    client, tokens, _ = make(quota_evaluations=3)
    refused = _register(client, tokens["owner"], hub_ref(1))
    problem = assert_problem(refused, 403, "quota-not-earned", "3 more are still needed")
    assert problem["evaluations_needed"] == 3 and problem["accepted_evaluations"] == 0
    assert "Retry-After" not in refused.headers
    quota = client.get("/v0/me/quota", headers=auth(tokens["owner"])).json()
    assert quota["evaluations_needed"] == problem["evaluations_needed"]


def test_the_weekly_limit_is_429_with_the_seconds_until_the_oldest_drops_out(registrar):
    make, _ = registrar
    client, tokens, ctx = make(registrations_per_week=2)
    clock = ctx.clock
    assert _register(client, tokens["owner"], hub_ref(1)).status_code == 201
    clock.advance(3600)
    assert _register(client, tokens["owner"], hub_ref(2)).status_code == 201
    clock.advance(1800)
    refused = _register(client, tokens["owner"], hub_ref(3))
    assert_problem(refused, 429, "rate-limited", "2 per week")
    wait = int(refused.headers["Retry-After"])
    assert wait == int((timedelta(days=7) - timedelta(seconds=5400)).total_seconds())
    assert f"possible in {wait} s" in refused.json()["detail"]
    clock.advance(wait - 1)
    again = _register(client, tokens["owner"], hub_ref(3))
    assert again.status_code == 429 and again.headers["Retry-After"] == "1"
    clock.advance(1)  # the first registration has left the 7-day window
    assert _register(client, tokens["owner"], hub_ref(3)).status_code == 201
    # admins are exempt
    assert _register(client, tokens["admin"], hub_ref(4)).status_code == 201


def test_no_retry_after_when_registrations_are_off(registrar):
    make, _ = registrar
    client, tokens, _ = make(registrations_per_week=0)
    refused = _register(client, tokens["owner"], hub_ref(1))
    assert_problem(refused, 429, "rate-limited", "the limit is 0 per week")
    assert "Retry-After" not in refused.headers
