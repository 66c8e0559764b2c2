"""People's API tokens over the API (``/v0/tokens``), on SQLite and PostgreSQL: made
with scopes the caller holds and shown once, listed without their secret, revoked
(refused at once, with the sessions opened with them); another account's is 404."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token

from .test_api import assert_problem, auth


@pytest.fixture
def client(make_ctx, db_url):
    ctx = make_ctx(db_url)
    create_account(ctx, "admin", is_admin=True)
    tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
    for name in ("owner", "other"):
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name, name="full").token
    tokens["owner-pull"] = issue_token(ctx, "owner", scopes=("task:pull",), name="pull").token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        api.tokens = tokens  # type: ignore[attr-defined]
        yield api


def call(api: Any, method: str, path: str, token: str | None, **kwargs: Any) -> Any:
    return api.request(method, path, headers=auth(token) if token else {}, **kwargs)


def test_a_token_is_made_shown_once_listed_and_revoked_at_once(client):
    owner = client.tokens["owner"]
    made = call(
        client, "POST", "/v0/tokens", owner, json={"name": "laptop", "scopes": ["task:pull"]}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    token = body["token"]
    assert token.startswith("qb_") and body["prefix"] == token[:10]
    assert (body["name"], body["scopes"], body["revoked_at"]) == ("laptop", ["task:pull"], None)
    me = call(client, "GET", "/v0/me", token).json()
    assert (me["name"], me["scopes"]) == ("owner", ["task:pull"])
    listed = call(client, "GET", "/v0/tokens", owner).json()
    assert [t["name"] for t in listed] == ["laptop", "pull", "full"]  # newest first
    assert token not in str(listed) and all("token" not in t for t in listed)
    assert listed[0]["last_used_at"] is not None  # it authenticated GET /v0/me
    gone = call(client, "DELETE", f"/v0/tokens/{body['id']}", owner)
    assert gone.status_code == 204
    assert_problem(call(client, "GET", "/v0/me", token), 401, "unauthenticated", "revoked")
    assert call(client, "GET", "/v0/tokens", owner).json()[0]["revoked_at"] is not None
    assert call(client, "DELETE", f"/v0/tokens/{body['id']}", owner).status_code == 204  # again


def test_another_accounts_token_is_404_even_for_an_admin(client):
    owner_tokens = call(client, "GET", "/v0/tokens", client.tokens["owner"]).json()
    full = next(t for t in owner_tokens if t["name"] == "full")
    for who in ("other", "admin"):
        refused = call(client, "DELETE", f"/v0/tokens/{full['id']}", client.tokens[who])
        assert_problem(refused, 404, "not-found", "has no API token")
    assert call(client, "GET", "/v0/me", client.tokens["owner"]).status_code == 200
    assert_problem(
        call(client, "DELETE", "/v0/tokens/999", client.tokens["owner"]), 404, "not-found"
    )
    assert_problem(call(client, "GET", "/v0/tokens", None), 401, "unauthenticated")
    others = call(client, "GET", "/v0/tokens", client.tokens["other"]).json()
    assert [t["name"] for t in others] == ["full"]


def test_a_token_gets_only_scopes_the_credential_holds(client):
    narrow = client.tokens["owner-pull"]
    wider = call(client, "POST", "/v0/tokens", narrow, json={"scopes": ["model:register"]})
    assert_problem(wider, 403, "forbidden", "model:register")
    admin = call(client, "POST", "/v0/tokens", client.tokens["owner"], json={"scopes": ["admin"]})
    assert_problem(admin, 403, "forbidden", "admin")
    default = call(client, "POST", "/v0/tokens", narrow, json={})
    assert default.status_code == 201 and default.json()["scopes"] == ["task:pull"]
    assert default.json()["name"] == "api"
    empty = call(client, "POST", "/v0/tokens", narrow, json={"scopes": []})
    assert_problem(empty, 422, "invalid-request")
    # a narrower credential cannot revoke a broader token
    full = next(t for t in call(client, "GET", "/v0/tokens", narrow).json() if t["name"] == "full")
    assert_problem(
        call(client, "DELETE", f"/v0/tokens/{full['id']}", narrow),
        403,
        "forbidden",
        "model:register",
    )
    expiring = call(client, "POST", "/v0/tokens", narrow, json={"expires_in_days": 30}).json()
    assert expiring["expires_at"] is not None


def test_a_signed_in_session_manages_its_accounts_tokens(client):
    session = client.post(
        "/v0/auth/token", json={"api_token": client.tokens["owner"], "scopes": ["model:register"]}
    ).json()
    jwt = session["access_token"]
    made = call(client, "POST", "/v0/tokens", jwt, json={"name": "ci"})
    assert made.status_code == 201 and made.json()["scopes"] == ["model:register"]
    ci = made.json()["token"]
    # a session opened with the new token ends when the token is revoked
    opened = client.post("/v0/auth/token", json={"api_token": ci}).json()["access_token"]
    assert call(client, "GET", "/v0/me", opened).status_code == 200
    assert call(client, "DELETE", f"/v0/tokens/{made.json()['id']}", jwt).status_code == 204
    assert_problem(call(client, "GET", "/v0/me", opened), 401, "unauthenticated", "revoked")
    assert call(client, "GET", "/v0/me", jwt).status_code == 200  # the session made it lives
