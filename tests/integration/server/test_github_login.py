"""Login with GitHub: the code flow (state, PKCE) and the device flow, against a fake GitHub.

The fake (``tests/integration/fake_github.py``) is a real HTTP server on 127.0.0.1
that checks what GitHub checks, PKCE included; the provider's URLs point at it
through settings. The browser's part is played by hand: the app's redirect is
followed to the fake, whose redirect is followed back to the app. The ``client``
fixture runs each flow on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.api.routes.oauth import STATE_COOKIE

from ..fake_github import CLIENT_ID, USER_CODE, FakeGitHub, s256
from .test_api import assert_problem, auth

CALLBACK = "/v0/auth/github/callback"


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        yield fake


def serve(make_ctx, tmp_path, *providers, url=None, base_url="http://testserver", **settings):
    url = url or f"sqlite:///{tmp_path / 'login.db'}"
    ctx = make_ctx(url, oauth_providers=list(providers), **settings)
    app = create_app(ctx.settings, context=ctx, run_scheduler=False)
    return TestClient(app, base_url=base_url)


@pytest.fixture
def client(make_ctx, tmp_path, github, db_url):
    """The app on SQLite and on PostgreSQL, with the fake GitHub as ``github``."""
    with serve(make_ctx, tmp_path, github.provider(), url=db_url) as client:
        yield client


def start(client) -> str:
    """The browser asks the app to log in; the URL of GitHub's login page."""
    answer = client.get("/v0/auth/github/login", follow_redirects=False)
    assert answer.status_code == 302, answer.text
    return str(answer.headers["location"])


def at_github(location: str) -> str:
    """The person logs in at GitHub; the URL GitHub sends the browser back to."""
    answer = httpx.get(location, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    return str(answer.headers["location"])


def back(client, url: str):
    parts = urlsplit(url)
    return client.get(f"{parts.path}?{parts.query}", follow_redirects=False)


def browser_login(client):
    return back(client, at_github(start(client)))


def set_state_cookie(client, state: str) -> None:
    """As if the browser held ``state`` in its cookie (a stolen or guessed one)."""
    client.cookies.set(STATE_COOKIE, state, domain="testserver.local", path=CALLBACK)


def claims(session: dict[str, Any]) -> dict[str, Any]:
    return jwt.decode(session["access_token"], options={"verify_signature": False})


def test_the_code_flow_sends_state_and_pkce_and_opens_a_working_session(client, github):
    location = start(client)
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert location.startswith(f"{github.url}/login/oauth/authorize?")
    assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["redirect_uri"] == f"http://testserver{CALLBACK}"
    assert len(query["state"]) >= 32
    assert client.cookies.get(STATE_COOKIE) == query["state"]

    answer = back(client, at_github(location))
    assert answer.status_code == 200, answer.text
    session = answer.json()
    assert session["account"] == "octocat" and session["provider"] == "github"
    assert session["token_type"] == "Bearer" and session["refresh_token"].startswith("qbr_")
    assert claims(session)["scope"] == "model:register task:pull task:submit"
    exchange = github.token_requests[-1]
    assert exchange["grant_type"] == "authorization_code"
    assert s256(exchange["code_verifier"]) == query["code_challenge"]
    assert 43 <= len(exchange["code_verifier"]) <= 128
    assert STATE_COOKIE not in client.cookies  # spent with the state

    me = client.get("/v0/me/quota", headers=auth(session["access_token"]))
    assert me.status_code == 200, me.text
    renewed = client.post("/v0/auth/refresh", json={"refresh_token": session["refresh_token"]})
    assert renewed.status_code == 200
    assert client.get("/v0/me/quota", headers=auth(renewed.json()["access_token"])).is_success


def test_the_state_cookie_is_bound_to_the_callback_and_kept_from_scripts(client):
    answer = client.get("/v0/auth/github/login", follow_redirects=False)
    cookie = answer.headers["set-cookie"].lower()
    assert f"path={CALLBACK}" in cookie and "httponly" in cookie and "samesite=lax" in cookie
    assert "max-age=600" in cookie and "secure" not in cookie  # plain http here


def test_a_callback_without_its_state_is_refused(client, github):
    location = start(client)
    code = parse_qs(urlsplit(at_github(location)).query)["code"][0]
    missing = client.get(f"{CALLBACK}?code={code}")
    assert_problem(missing, 400, "invalid-state", "no state")
    forged = client.get(f"{CALLBACK}?code={code}&state=made-up")
    assert_problem(forged, 400, "invalid-state", "not started in this browser")
    unknown_client = TestClient(client.app)  # another browser: no state cookie
    query = urlsplit(at_github(start(client))).query
    assert_problem(unknown_client.get(f"{CALLBACK}?{query}"), 400, "invalid-state", "browser")
    set_state_cookie(client, "made-up")
    unknown = client.get(f"{CALLBACK}?code={code}&state=made-up")
    assert_problem(unknown, 400, "invalid-state", "unknown login state")
    assert not github.token_requests  # nothing refused here reached GitHub


def test_a_state_is_good_for_one_callback(client, github):
    url = at_github(start(client))
    state = parse_qs(urlsplit(url).query)["state"][0]
    assert back(client, url).status_code == 200
    replay = back(client, url)  # the browser no longer has the cookie
    assert_problem(replay, 400, "invalid-state", "not started in this browser")
    set_state_cookie(client, state)  # nor does a stolen one help
    assert_problem(back(client, url), 400, "invalid-state", "used already")
    assert len(github.token_requests) == 1


def test_an_expired_state_is_refused(client, clock, github):
    url = at_github(start(client))
    clock.advance(601)
    assert_problem(back(client, url), 400, "invalid-state", "longer than 10 minutes")
    assert not github.token_requests


def test_a_code_redeemed_with_another_logins_verifier_is_refused(client, github):
    """Code injection: a code issued for one login, brought back with another's state.

    The server sends that other login's PKCE verifier, which does not hash to the
    code's challenge, so GitHub (the fake, as GitHub does) refuses it.
    """
    stolen = parse_qs(urlsplit(at_github(start(client))).query)["code"][0]
    state = parse_qs(urlsplit(start(client)).query)["state"][0]
    answer = client.get(f"{CALLBACK}?code={stolen}&state={state}")
    assert_problem(answer, 401, "unauthenticated", "code_verifier does not match")
    assert github.token_requests[-1]["code_verifier"]


def test_a_login_declined_at_github_is_a_403(client, github):
    github.decline = True
    assert_problem(browser_login(client), 403, "access-denied", "declined at github")


def test_a_wrong_client_secret_is_the_servers_fault(make_ctx, tmp_path, github):
    with serve(make_ctx, tmp_path, github.provider(client_secret="wrong")) as client:
        answer = browser_login(client)
    assert_problem(answer, 502, "provider-error", "incorrect_client_credentials")


def test_the_same_github_id_is_the_same_account_even_after_a_rename(client, github):
    first = browser_login(client).json()
    github.user = {"id": 4242, "login": "octocat-renamed"}
    renamed = browser_login(client).json()
    assert claims(renamed)["sub"] == claims(first)["sub"]
    assert renamed["account"] == "octocat"
    github.user = {"id": 99, "login": "octocat"}  # someone else took the old login name
    other = browser_login(client).json()
    assert claims(other)["sub"] != claims(first)["sub"]
    assert other["account"].startswith("octocat-")
    device = device_login(client, github)  # the device flow finds the same identity
    assert device.status_code == 200, device.text
    assert claims(device.json())["sub"] == claims(other)["sub"]


def test_a_user_document_without_the_subject_field_is_refused(make_ctx, tmp_path, github):
    provider = github.provider(subject_field="node_id")
    with serve(make_ctx, tmp_path, provider) as client:
        answer = browser_login(client)
    assert_problem(answer, 502, "provider-error", "no 'node_id'")


def test_a_configured_return_path_gets_the_session_in_the_fragment(make_ctx, tmp_path, github):
    with serve(make_ctx, tmp_path, github.provider(), login_return_path="/welcome") as client:
        answer = browser_login(client)
        assert answer.status_code == 303
        path, _, fragment = answer.headers["location"].partition("#")
        session = {k: v[0] for k, v in parse_qs(fragment).items()}
        assert path == "/welcome" and session["account"] == "octocat"
        me = client.get("/v0/me/quota", headers=auth(session["access_token"]))
        assert me.status_code == 200


def test_a_configured_redirect_uri_is_sent_and_used_for_the_exchange(make_ctx, tmp_path, github):
    public = "https://qb.example/v0/auth/github/callback"  # behind a TLS proxy, say
    provider = github.provider(redirect_uri=public)
    with serve(make_ctx, tmp_path, provider, base_url="https://testserver") as client:
        first = client.get("/v0/auth/github/login", follow_redirects=False)
        assert "secure" in first.headers["set-cookie"].lower()
        location = start(client)
        assert parse_qs(urlsplit(location).query)["redirect_uri"] == [public]
        returned = at_github(location)
        assert returned.startswith(public + "?")
        answer = back(client, returned)
    assert answer.status_code == 200, answer.text
    assert github.token_requests[-1]["redirect_uri"] == public


def test_unknown_providers_are_404(client):
    assert_problem(client.get("/v0/auth/gitlab/login"), 404, "not-found", "configured: github")
    assert_problem(client.post("/v0/auth/gitlab/device"), 404, "not-found")


# --- the device flow ----------------------------------------------------------------


def device_start(client) -> dict[str, Any]:
    answer = client.post("/v0/auth/github/device")
    assert answer.status_code == 200, answer.text
    started: dict[str, Any] = answer.json()
    return started


def poll(client, started: dict[str, Any]):
    return client.post("/v0/auth/github/device/token", json={"device": started["device"]})


def device_login(client, github):
    github.device_script = ["ok"]
    return poll(client, device_start(client))


def test_the_device_flow_polls_until_approved(client, clock, github):
    started = device_start(client)
    assert started["user_code"] == USER_CODE
    assert started["verification_uri"] == f"{github.url}/login/device"
    assert started["interval"] == 5 and started["expires_in"] == 900
    assert started["device"] not in github.devices  # a handle, not GitHub's device code
    pending = poll(client, started)
    body = assert_problem(pending, 428, "authorization-pending")
    assert body["interval"] == 5 and pending.headers["retry-after"] == "5"
    early = poll(client, started)  # before the interval: answered here, not by GitHub
    assert assert_problem(early, 428, "slow-down")["interval"] == 5
    assert len(github.device_polls) == 1
    clock.advance(5)
    approved = poll(client, started)
    assert approved.status_code == 200, approved.text
    session = approved.json()
    assert session["account"] == "octocat" and session["provider"] == "github"
    assert client.get("/v0/me/quota", headers=auth(session["access_token"])).is_success
    refreshed = client.post("/v0/auth/refresh", json={"refresh_token": session["refresh_token"]})
    assert refreshed.status_code == 200
    clock.advance(5)
    assert_problem(poll(client, started), 400, "invalid-state", "has ended")
    assert len(github.device_polls) == 2
    assert "client_secret" not in github.token_requests[-1]  # GitHub's device flow needs none


def test_slow_down_from_github_adds_five_seconds_from_then_on(client, clock, github):
    github.device_script = ["slow_down", "authorization_pending", "ok"]
    started = device_start(client)
    slowed = poll(client, started)
    assert assert_problem(slowed, 428, "slow-down")["interval"] == 10
    clock.advance(5)
    assert assert_problem(poll(client, started), 428, "slow-down")["interval"] == 10
    assert len(github.device_polls) == 1  # the early poll never reached GitHub
    clock.advance(5)
    assert assert_problem(poll(client, started), 428, "authorization-pending")["interval"] == 10
    clock.advance(10)
    assert poll(client, started).status_code == 200
    assert [outcome for _, outcome in github.device_polls] == [
        "slow_down",
        "authorization_pending",
        "ok",
    ]


def test_a_declined_device_login_is_a_403_and_ends(client, clock, github):
    github.device_script = ["authorization_pending", "access_denied"]
    started = device_start(client)
    assert poll(client, started).status_code == 428
    clock.advance(5)
    assert_problem(poll(client, started), 403, "access-denied", "declined at github")
    clock.advance(5)
    assert_problem(poll(client, started), 400, "invalid-state", "has ended")


def test_an_expired_device_code_is_a_410(client, clock, github):
    github.device_script = ["expired_token"]
    started = device_start(client)
    assert_problem(poll(client, started), 410, "expired-token", "expired")
    again = device_start(client)
    clock.advance(901)  # past expires_in: the server knows without asking GitHub
    assert_problem(poll(client, again), 410, "expired-token", "expired")
    assert len(github.device_polls) == 1


def test_an_unknown_device_handle_is_refused(client, github):
    answer = client.post("/v0/auth/github/device/token", json={"device": "made-up"})
    assert_problem(answer, 400, "invalid-state", "unknown device login")
    assert not github.device_polls


def test_a_provider_without_a_device_url_has_no_device_flow(make_ctx, tmp_path, github):
    with serve(make_ctx, tmp_path, github.provider(device_code_url=None)) as client:
        assert_problem(client.post("/v0/auth/github/device"), 404, "not-found", "device flow")


def test_an_unreachable_github_is_a_502(make_ctx, tmp_path, github):
    provider = github.provider(device_code_url="http://127.0.0.1:9/login/device/code")
    with serve(make_ctx, tmp_path, provider) as client:
        answer = client.post("/v0/auth/github/device")
    assert_problem(answer, 502, "provider-error", "could not be reached")
