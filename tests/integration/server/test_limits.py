"""Write rate limits per account (429 + Retry-After), the body limit (413), the quota."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth, pull, register, submit


@pytest.fixture
def limited(make_ctx, tmp_path):
    """A server with a tight write limit, two runner accounts and an owner."""
    ctx = make_ctx(
        f"sqlite:///{tmp_path / 'limits.db'}", write_rate_limit="3/minute", max_body_bytes=4096
    )
    ctx.inspector = lambda ref: fake_metadata(ref)
    tokens = {}
    for name in ("aa", "bb"):
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name).token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        yield client, tokens


def test_writes_over_the_limit_get_429_with_retry_after_per_account(limited):
    client, tokens = limited
    for _ in range(3):
        assert client.post("/v0/leases", json={}, headers=auth(tokens["aa"])).status_code == 204
    # another X-Forwarded-For does not make another client: the key is the account
    spoofed = {**auth(tokens["aa"]), "X-Forwarded-For": "203.0.113.7"}
    refused = client.post("/v0/leases", json={}, headers=spoofed)
    problem = assert_problem(refused, 429, "rate-limited", "3 per 1 minute")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "retry in" in problem["detail"]
    # other accounts have their own window; reads are not limited
    assert client.post("/v0/leases", json={}, headers=auth(tokens["bb"])).status_code == 204
    assert client.get("/v0/leaderboard").status_code == 200
    # a request without a valid token is refused before it could count
    assert client.post("/v0/leases", json={}).status_code == 401


def test_a_body_over_the_limit_gets_413_problem_json(limited):
    client, tokens = limited
    big = {"runner": "x" * 5000}
    response = client.post("/v0/leases", json=big, headers=auth(tokens["aa"]))
    assert_problem(response, 413, "body-too-large", "QB_MAX_BODY_BYTES")

    def chunks():
        yield b'{"runner": "'
        yield b"x" * 10
        yield b'"}'

    chunked = client.post("/v0/leases", content=chunks(), headers=auth(tokens["aa"]))
    assert_problem(chunked, 411, "length-required", "Content-Length")


def test_unknown_routes_are_problem_json_too(limited):
    client, _ = limited
    assert_problem(client.get("/v0/nothing-here"), 404, "not-found")
    assert_problem(client.put("/v0/leaderboard"), 405, "method-not-allowed")


def test_quota_shows_progress_and_the_refusal_says_what_is_missing(make_ctx, tmp_path):
    ctx = make_ctx(f"sqlite:///{tmp_path / 'quota.db'}", quota_evaluations=1)
    ctx.inspector = lambda ref: fake_metadata(ref)
    create_account(ctx, "admin", is_admin=True)
    people = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
    for name in ("owner", "r1", "r2", "r3"):
        create_account(ctx, name)
        people[name] = issue_token(ctx, name).token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        before = api.get("/v0/me/quota", headers=auth(people["r1"])).json()
        assert before["accepted_evaluations"] == 0 and before["evaluations_needed"] == 1
        assert before["can_register"] is False
        refused = register(api, people, hub_ref(70), who="r1")
        problem = assert_problem(refused, 403, "quota-not-earned", "1 more is still needed")
        assert (problem["accepted_evaluations"], problem["evaluations_needed"]) == (0, 1)
        assert "Retry-After" not in refused.headers  # waiting alone will not help
        assert register(api, people, hub_ref(71), who="admin").status_code == 201
        leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
        for who in ("r1", "r2"):
            assert submit(api, people, who, leases[who], 0.5).status_code == 201
        pending = api.get("/v0/me/quota", headers=auth(people["r1"])).json()
        assert pending["accepted_evaluations"] == 0  # the task is not DONE yet
        assert submit(api, people, "r3", leases["r3"], 0.5).status_code == 201
        after = api.get("/v0/me/quota", headers=auth(people["r1"])).json()
        assert after == {
            **before,
            "accepted_evaluations": 1,
            "evaluations_needed": 0,
            "can_register": True,
        }
        assert register(api, people, hub_ref(70), who="r1").status_code == 201
