"""Canaries: settled tasks kept open for one more runner, who cannot tell.

With ``canary_rate=1`` every task that reaches consensus while another runner is
about becomes a canary. The fourth runner must see exactly what the first three saw
(payload and public views), its answer is checked against the settled consensus, and
only then is the task published, with the consensus it had.
"""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from quorumbench.api.app import create_app
from quorumbench.db.models import Result, Runner
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.scheduler import tick

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, pull, register, submit

RUNNERS = ("r1", "r2", "r3", "r4")


def _world(make_ctx, url=None, **overrides):
    ctx = make_ctx(url, **{"canary_rate": 1.0, "canary_window_s": 600, **overrides})
    ctx.inspector = fake_metadata
    people = {}
    for name in ("owner", *RUNNERS):
        create_account(ctx, name)
        people[name] = issue_token(ctx, name).token
    return ctx, people


def _settle(api, people):
    """r4 is about (it asked for work); r1-r3 evaluate the one task and agree."""
    assert register(api, people, hub_ref(1)).status_code == 201
    leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
    assert pull(api, people, "r4").status_code == 204  # all slots leased; r4 is seen
    for who, score in (("r1", 0.5), ("r2", 0.75), ("r3", 0.5)):
        answer = submit(api, people, who, leases[who], score)
        assert answer.status_code == 201, answer.text
    return leases, answer.json()


def _runner(ctx, name):
    with ctx.db.read() as session:
        return session.scalars(select(Runner).where(Runner.name == f"{name}-box")).one()


def test_a_canary_looks_like_any_open_task_and_an_honest_answer_passes(make_ctx, db_url):
    ctx, people = _world(make_ctx, db_url)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        leases, third = _settle(api, people)
        task_id = leases["r1"]["task"]["id"]
        # Settled but not published: to everyone it is still an open task.
        assert third["task_status"] == "PENDING"
        view = api.get(f"/v0/tasks/{task_id}").json()
        assert view["status"] == "PENDING" and view["final"] is False
        assert view["results"] == [] and view["n_results"] is None and view["outcomes"] == []
        assert view["canary"] is None
        assert api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()["rows"] == []
        assert api.get("/v0/log/head").json()["size"] == 0
        assert _runner(ctx, "r1").agreements == 0  # reputation moves when it is published

        canary = pull(api, people, "r4").json()
        assert canary["task"] == leases["r1"]["task"]  # the very payload the others got
        assert set(canary) == set(leases["r1"])
        done = submit(api, people, "r4", canary, 0.5)
        assert done.status_code == 201 and done.json()["task_status"] == "DONE"

        view = api.get(f"/v0/tasks/{task_id}").json()
        assert view["status"] == "DONE" and view["score"] == 0.5 and view["n_results"] == 4
        r4 = [r for r in view["results"] if r["id"] == done.json()["result_id"]][0]
        assert r4["counted"] is False and r4["outlier"] is False
        assert view["canary"]["checks"] == [{"result_id": r4["id"], "passed": True}]
        row = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()["rows"][0]
        assert row["score"] == 0.5 and row["n_tasks"] == 1 and row["n_samples"] == 4
        entry = api.get("/v0/log/entries", params={"start": 0}).json()[0]["entry"]
        assert entry["canary"]["checks"] == view["canary"]["checks"]
        assert len(entry["results"]) == 4 and entry["consensus"]["score"] == 0.5
        assert _runner(ctx, "r4").agreements == 1 and _runner(ctx, "r4").outliers == 0
        assert _runner(ctx, "r1").agreements == 1 and _runner(ctx, "r2").agreements == 1


def test_a_wrong_canary_answer_costs_reputation_and_changes_no_score(make_ctx):
    ctx, people = _world(make_ctx, outlier_limit=1)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        leases, _ = _settle(api, people)
        canary = pull(api, people, "r4").json()
        done = submit(api, people, "r4", canary, 0.0)  # 0.0 vs 0.5-0.75 with threshold 0.5
        assert done.json()["task_status"] == "DONE"
        view = api.get(f"/v0/tasks/{leases['r1']['task']['id']}").json()
        assert view["score"] == 0.5
        assert view["canary"]["checks"] == [
            {"result_id": done.json()["result_id"], "passed": False}
        ]
        with ctx.db.read() as session:
            stored = session.get_one(Result, done.json()["result_id"])
            assert stored.outlier is True and stored.counted is False
        r4 = _runner(ctx, "r4")
        assert (r4.agreements, r4.outliers, r4.suspended) == (0, 1, True)
        assert_problem(pull(api, people, "r4"), 403, "forbidden", "suspended")
        row = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()["rows"][0]
        assert row["score"] == 0.5 and row["n_tasks"] == 1


def test_a_canary_nobody_takes_is_published_when_its_window_ends(make_ctx, clock):
    ctx, people = _world(make_ctx, canary_window_s=30)  # shorter than a lease (60 s)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        leases, _ = _settle(api, people)
        task_id = leases["r1"]["task"]["id"]
        canary = pull(api, people, "r4").json()  # taken, then abandoned
        clock.advance(ctx.settings.canary_window_s + 1)
        assert tick(ctx).published == 0  # its lease is still live: wait for it
        clock.advance(ctx.settings.lease_seconds)
        report = tick(ctx)  # the lease expires; the task is published
        assert report.expired == 1 and report.published == 1
        view = api.get(f"/v0/tasks/{task_id}").json()
        assert view["status"] == "DONE" and view["score"] == 0.5
        assert view["canary"]["checks"] == [] and view["n_results"] == 3
        assert pull(api, people, "r4").status_code == 204  # nothing left to take
        late = submit(api, people, "r4", canary, 0.5)
        assert late.status_code == 409  # the expired lease counts for nothing
        assert api.get("/v0/log/head").json()["size"] == 1
        assert _runner(ctx, "r1").agreements == 1


def test_no_canary_without_another_runner_about(make_ctx):
    ctx, people = _world(make_ctx)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        assert register(api, people, hub_ref(1)).status_code == 201
        leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
        for who in ("r1", "r2"):
            submit(api, people, who, leases[who], 0.5)
        # r4 never asked for work: nobody could take a canary, so it is published.
        assert submit(api, people, "r3", leases["r3"], 0.5).json()["task_status"] == "DONE"
