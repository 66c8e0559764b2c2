"""``/v0/asks`` and ``/v0/plans`` over HTTP (the app in process), with a real endpoint
on loopback that checks its key (``endpoint_server.py``)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app
from quorumbench.services.accounts import create_account, issue_token

from .endpoint_server import serve_endpoint
from .test_asks_live import KEY, LIVE, PLAN


@pytest.fixture
def site(make_ctx, sums_spec):
    ctx = make_ctx(benchmarks=[sums_spec], ask_per_account=2, **LIVE)
    for name in ("alice", "bob"):
        create_account(ctx, name)
    tokens = {name: issue_token(ctx, name).token for name in ("alice", "bob")}
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        client.tokens = tokens
        yield client


def as_(client, who):
    return {"Authorization": f"Bearer {client.tokens[who]}"}


def poll(client, ask_id, headers, timeout=60.0):
    deadline = time.monotonic() + timeout
    statuses = []
    while time.monotonic() < deadline:
        answer = client.get(f"/v0/asks/{ask_id}", headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if not statuses or statuses[-1] != body["status"]:
            statuses.append(body["status"])
        if body["status"] in ("SUCCESS", "FAILURE"):
            return body, statuses
        time.sleep(0.05)
    raise AssertionError(statuses)


def test_an_ask_with_an_endpoint_over_http(site):
    answers = []
    with serve_endpoint(KEY) as endpoint:
        body = {"plan": PLAN, "endpoints": [{"url": endpoint.url, "model": "mine", "api_key": KEY}]}
        refused = site.post("/v0/asks", json=body)
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "signed-in account" in refused.json()["detail"]
        made = site.post("/v0/asks", json=body, headers=as_(site, "alice"))
        answers.append(made)
        assert made.status_code == 201, made.text
        ask = made.json()
        assert ask["status"] in ("PENDING", "STARTED") and ask["samples_cap"] == 20
        assert ask["plan"]["endpoints"] == [{"url": endpoint.url, "model": "mine"}]
        done, statuses = poll(site, ask["id"], as_(site, "alice"))
    assert done["status"] == "SUCCESS", done
    assert statuses[-1] == "SUCCESS" and set(statuses) <= {"PENDING", "STARTED", "SUCCESS"}
    assert (done["progress_done"], done["progress_total"]) == (20, 20)
    board = site.get(f"/v0/asks/{ask['id']}/board", headers=as_(site, "alice"))
    answers.append(board)
    assert board.status_code == 200, board.text
    [row] = board.json()["endpoints"]
    assert row["n_samples"] == 20 and row["score"] == pytest.approx(0.05)
    assert row["ci_low"] < 0.05 < row["ci_high"]
    assert row["cross_checked"] is False and row["note"] == "one evaluation, not cross-checked"
    assert board.json()["plan"]["endpoints"] == []  # the board's plan is the public one
    for accept in ({"Accept": "text/csv"}, {}):
        params = {} if accept else {"format": "csv"}
        csv = site.get(
            f"/v0/asks/{ask['id']}/board", params=params, headers={**as_(site, "alice"), **accept}
        )
        answers.append(csv)
        assert csv.headers["content-type"].startswith("text/csv")
        lines = csv.text.splitlines()
        assert lines[0].startswith("rank,model,score")
        assert "mine (" in lines[-1] and "not cross-checked" in lines[-1]
    # another account, or nobody, is told it does not exist
    for headers in (as_(site, "bob"), {}):
        for path in (f"/v0/asks/{ask['id']}", f"/v0/asks/{ask['id']}/board"):
            hidden = site.get(path, headers=headers)
            assert hidden.status_code == 404, path
            assert endpoint.url not in hidden.text
    # the public plan is shared without the endpoint
    shared = site.get(f"/v0/plans/{ask['plan_id']}")
    answers.append(shared)
    assert shared.status_code == 200 and shared.json()["plan"]["endpoints"] == []
    assert not any(KEY in a.text for a in answers)


def test_refusals_are_problems_with_their_reason(site):
    bad_plan = site.post("/v0/asks", json={"plan": {**PLAN, "budget": 0}})
    assert bad_plan.status_code == 422
    assert bad_plan.json()["type"].endswith("/invalid-plan")
    assert "budget must be" in bad_plan.json()["detail"]
    neither = site.post("/v0/asks", json={})
    assert neither.status_code == 422 and "query or a plan" in neither.text
    with_key_in_url = site.post(
        "/v0/asks",
        json={"plan": PLAN, "endpoints": [{"url": "https://e.example.com/v1?k=1", "model": "m"}]},
        headers=as_(site, "alice"),
    )
    assert with_key_in_url.status_code == 422
    deepen = site.post("/v0/asks", json={"plan": PLAN, "deepen": True})
    assert deepen.status_code == 401 and "signed-in account" in deepen.json()["detail"]
    bad_token = site.post("/v0/asks", json={"plan": PLAN}, headers={"Authorization": "Bearer x"})
    assert bad_token.status_code == 401
    assert site.get("/v0/plans/" + "0" * 64).status_code == 404
    assert site.get("/v0/asks/no-such-ask").status_code == 404


def test_asks_with_endpoints_per_account_are_capped(site):
    with serve_endpoint(KEY) as endpoint:
        body = {"plan": PLAN, "endpoints": [{"url": endpoint.url, "model": "m", "api_key": KEY}]}
        for _ in range(2):
            made = site.post("/v0/asks", json=body, headers=as_(site, "alice"))
            assert made.status_code == 201, made.text
            poll(site, made.json()["id"], as_(site, "alice"))
        third = site.post("/v0/asks", json=body, headers=as_(site, "alice"))
        assert third.status_code == 429
        assert "QB_ASK_PER_ACCOUNT is 2" in third.json()["detail"]
        assert int(third.headers["retry-after"]) > 0
        # others, and asks without endpoints, are not affected
        bobs = site.post("/v0/asks", json=body, headers=as_(site, "bob"))
        assert bobs.status_code == 201
        assert (
            site.post("/v0/asks", json={"plan": PLAN}, headers=as_(site, "alice")).status_code
            == 201
        )
        # bob's ask ends while its endpoint still answers (else the server's shutdown
        # waits for its requests to the closed endpoint to time out)
        poll(site, bobs.json()["id"], as_(site, "bob"))


def test_a_cache_only_ask_is_anyones(site):
    made = site.post("/v0/asks", json={"plan": PLAN})
    assert made.status_code == 201
    ask = made.json()
    assert ask["status"] == "SUCCESS" and ask["samples_cap"] is None and ask["report"] is None
    assert site.get(f"/v0/asks/{ask['id']}", headers=as_(site, "bob")).status_code == 200
    board = site.get(f"/v0/asks/{ask['id']}/board")
    assert board.status_code == 200 and board.json()["endpoints"] == []


def test_the_openapi_document_has_the_ask_routes(site):
    doc = site.get("/openapi.json").json()
    post = doc["paths"]["/v0/asks"]["post"]
    assert {"201", "401", "422", "429", "503"} <= set(post["responses"])
    schema = doc["components"]["schemas"]["EndpointIn"]["properties"]["api_key"]
    assert schema["anyOf"][0].get("writeOnly") is True
    for path in ("/v0/asks/{ask_id}", "/v0/asks/{ask_id}/board", "/v0/plans/{plan_id}"):
        assert "404" in doc["paths"][path]["get"]["responses"], path
    assert (
        "text/csv" in doc["paths"]["/v0/asks/{ask_id}/board"]["get"]["responses"]["200"]["content"]
    )


def test_a_query_becomes_a_plan_with_the_planners_report(site):
    made = site.post("/v0/asks", json={"query": "math questions for my xyzzy"})
    assert made.status_code == 201, made.text
    ask = made.json()
    report = ask["report"]
    assert report["planner"].startswith("offline/") and report["query"] == ask["query"]
    assert {"text": "math", "key": "subject", "value": "science/math"}.items() <= next(
        m for m in report["matches"] if m["key"] == "subject"
    ).items()
    assert "xyzzy" in report["unmapped"]  # reported, not guessed
    assert ask["plan"]["labels"]["subject"] == ["science/math"]
    assert ask["plan"]["versions"]["benchmarks"] == {"sums": 1}  # the server's catalog
    again = site.get(f"/v0/asks/{ask['id']}").json()
    assert again["report"] == report


def test_a_query_with_an_endpoint_evaluates_the_slice_the_planner_chose(site):
    with serve_endpoint(KEY) as endpoint:
        made = site.post(
            "/v0/asks",
            json={
                "query": "math",
                "endpoints": [{"url": endpoint.url, "model": "mine", "api_key": KEY}],
            },
            headers=as_(site, "alice"),
        )
        assert made.status_code == 201, made.text
        done, _ = poll(site, made.json()["id"], as_(site, "alice"))
    assert done["status"] == "SUCCESS", done
    # sums' 20 items are all science/math: fewer than the planner's budget of 100
    assert (done["progress_total"], done["samples_cap"]) == (20, 100)


def test_deepen_is_scheduled_and_its_progress_shown(site):
    made = site.post("/v0/asks", json={"plan": PLAN, "deepen": True}, headers=as_(site, "alice"))
    assert made.status_code == 201, made.text
    deepen = made.json()["deepen"]
    assert deepen["requested"]["plan_id"] == made.json()["plan_id"]
    assert "tasks" in deepen["progress"]
    nothing = site.post(
        "/v0/asks",
        json={"plan": {"benchmarks": ["no-such-benchmark"]}, "deepen": True},
        headers=as_(site, "alice"),
    )
    assert nothing.status_code == 404 and "nothing to deepen" in nothing.json()["detail"]


def test_the_operators_llm_planner_falls_back_and_says_so(make_ctx, sums_spec):
    with serve_endpoint("planner-key") as planner:  # answers "7": not a plan
        ctx = make_ctx(
            benchmarks=[sums_spec],
            ask_planner_url=planner.url,
            ask_planner_model="mine",
            ask_planner_api_key="planner-key",
        )
        with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
            made = client.post("/v0/asks", json={"query": "math"})
    assert made.status_code == 201, made.text
    report = made.json()["report"]
    assert report["planner"].startswith("offline/") and report["fallback"]
    assert planner.chat_calls() == 1 and all(ok for _, ok in planner.seen)  # with its key
    assert "planner-key" not in made.text
