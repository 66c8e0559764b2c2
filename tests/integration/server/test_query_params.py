"""Unknown query parameters under /v0 are refused with 400, naming them (api/params.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from quorumbench.api.app import create_app

from ..fake_github import FakeGitHub
from .conftest import hub_ref
from .test_api import auth, pull, register
from .test_github_login import at_github, back, serve, start


def assert_unknown(response, unknown, allowed):
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == "/problems/unknown-parameter"
    assert body["unknown"] == unknown and body["allowed"] == allowed
    for name in unknown:
        assert repr(name) in body["detail"]
    return body


def test_a_misspelt_filter_is_refused_not_ignored(api, people):
    register(api, people, hub_ref(1))
    body = assert_unknown(
        api.get("/v0/tasks?model=2"),
        ["model"],
        ["status", "model_id", "benchmark", "limit", "after_id"],
    )
    assert body["detail"] == (
        "unknown query parameter 'model'; this endpoint accepts status, model_id, benchmark, "
        "limit, after_id"
    )
    assert body["instance"] == "/v0/tasks"
    both = assert_unknown(
        api.get("/v0/tasks?model=2&stat=DONE&limit=3&model=4"),
        ["model", "stat"],
        ["status", "model_id", "benchmark", "limit", "after_id"],
    )
    assert both["detail"].startswith("unknown query parameters 'model', 'stat';")
    assert api.get("/v0/tasks?flag").status_code == 400  # a bare name is a parameter too
    model_id = api.get("/v0/models").json()[0]["id"]
    tasks = api.get("/v0/tasks", params={"model_id": model_id, "limit": 500, "status": "PENDING"})
    assert tasks.status_code == 200 and tasks.json()
    assert api.get("/v0/tasks", params={"model_id": model_id + 1}).json() == []


@pytest.mark.parametrize(
    ("path", "unknown", "allowed"),
    [
        ("/v0/models?page=2", ["page"], ["limit", "after_id"]),
        (
            "/v0/leaderboard?benchmark=arith&sort_by=score",
            ["sort_by"],
            [
                "benchmark",
                "sort",
                "order",
                "min_samples",
                "q",
                "limit",
                "offset",
                "format",
                "unranked",
            ],
        ),
        ("/v0/log/entries?start=0&count=5", ["count"], ["start", "limit"]),
        ("/v0/log/head?sise=1", ["sise"], ["size"]),
        ("/v0/benchmarks?name=arith", ["name"], []),
        ("/v0/epochs/current?verbose=1", ["verbose"], []),
        ("/v0/health?x=1", ["x"], []),
    ],
)
def test_other_endpoints_refuse_unknown_parameters(api, path, unknown, allowed):
    body = assert_unknown(api.get(path), unknown, allowed)
    if not allowed:
        assert body["detail"].endswith("this endpoint takes no query parameters")


@pytest.mark.parametrize(
    "path",
    [
        "/v0/models?limit=5&after_id=0",
        "/v0/leaderboard?benchmark=arith&sort=score&order=asc&min_samples=0&q=x&limit=5"
        "&offset=0&format=csv",
        "/v0/log/entries?start=0&limit=5",
        "/v0/benchmarks",
        "/v0/health",
    ],
)
def test_declared_parameters_are_still_accepted(api, path):
    assert api.get(path).status_code == 200


def test_a_write_with_an_unknown_parameter_does_nothing(api, people):
    register(api, people, hub_ref(2))
    lease = pull(api, people, "r1").json()
    base = f"/v0/leases/{lease['lease_id']}"
    refused = api.delete(
        base,
        params={"attempt": lease["attempt"], "runner": "r1-box", "force": "1"},
        headers=auth(people["r1"]),
    )
    assert_unknown(refused, ["force"], ["attempt", "runner"])
    beat = api.post(
        f"{base}/heartbeat",
        params={"runner": "r1-box"},
        json={"attempt": lease["attempt"]},
        headers=auth(people["r1"]),
    )
    assert beat.status_code == 200, beat.text  # the lease was not released
    released = api.delete(
        base, params={"attempt": lease["attempt"], "runner": "r1-box"}, headers=auth(people["r1"])
    )
    assert released.status_code == 204, released.text


def test_unknown_paths_and_methods_keep_their_own_answers(api):
    assert api.get("/v0/nothing-here?x=1").status_code == 404
    assert api.put("/v0/tasks?x=1").status_code == 405
    # GET and POST share /v0/models: the GET's parameters are the ones checked
    assert api.get("/v0/models?limit=1").status_code == 200


def test_the_web_pages_keep_their_own_handling(api):
    assert api.get("/?utm_source=x").status_code == 200
    assert api.get("/?sort=nonsense").status_code == 400  # the page's own validation


def test_the_oauth_callback_takes_what_the_provider_adds(make_ctx, tmp_path):
    with FakeGitHub() as github, serve(make_ctx, tmp_path, github.provider()) as client:
        url = at_github(start(client))
        extra = "&iss=https%3A%2F%2Fgithub.com&error_uri=&authuser=0"
        answer = back(client, url + extra)
        assert answer.status_code == 200, answer.text
        assert answer.json()["account"] == "octocat"
        declined = client.get(
            "/v0/auth/github/callback?error=access_denied&error_description=The+user+has+"
            "denied&error_uri=https%3A%2F%2Fdocs.github.com&state=x"
        )
        assert declined.json()["type"] != "/problems/unknown-parameter"
        assert urlsplit(url).path == "/v0/auth/github/callback"


def test_each_route_is_read_once(ctx, monkeypatch):
    from fastapi.testclient import TestClient

    from quorumbench.api import params

    calls = []
    real = params.api_routes
    monkeypatch.setattr(params, "api_routes", lambda app: calls.append(app) or real(app))
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        for _ in range(3):
            assert client.get("/v0/tasks?model=2").status_code == 400
            assert client.get("/v0/tasks?limit=2").status_code == 200
    assert len(calls) == 1
