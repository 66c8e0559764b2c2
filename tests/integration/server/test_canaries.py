"""Canaries: settled tasks kept open for one more runner, who cannot tell.

With ``canary_rate=1`` every task that reaches consensus while another runner is
about becomes a canary. The fourth runner must see exactly what the first three saw
(payload and public views), its answer is checked against the settled consensus
(sample by sample, within the tolerance), and only then is the task published, with
the consensus it had.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from quorumbench.api.app import create_app
from quorumbench.core.publiclog import check_canaries
from quorumbench.db.models import Result, Runner, Task
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.scheduler import tick

from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth, payload, pull, register, signed, submit

RUNNERS = ("r1", "r2", "r3", "r4")
TRUTH = (1.0, 1.0, 0.0, 1.0, 0.0)
"""What evaluating the task gives (5 samples: one may differ under the default 0.2)."""
SLIP = (1.0, 1.0, 0.0, 1.0, 1.0)
"""An honest run that differs on one sample (batch arithmetic, say)."""
FLIPPED = (0.0, 1.0, 1.0, 1.0, 0.0)
"""Two answers flipped: the same score (0.6) as the truth, so the score rule alone
would pass it."""


def submit_samples(api, people, who, lease, samples):
    """Submit per-sample scores (the score is their mean)."""
    body = payload(lease, 0.0)
    body["result"].update(sample_scores=list(samples), score=sum(samples) / len(samples))
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=signed(api, people, who, lease, body),
        headers=auth(people[who]),
    )


def _world(make_ctx, url=None, **overrides):
    settings = {"canary_rate": 1.0, "canary_window_s": 600, "samples_per_task": 5}
    ctx = make_ctx(url, **{**settings, **overrides})
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
    for who, samples in (("r1", TRUTH), ("r2", SLIP), ("r3", TRUTH)):
        answer = submit_samples(api, people, who, leases[who], samples)
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
        done = submit_samples(api, people, "r4", canary, TRUTH)
        assert done.status_code == 201 and done.json()["task_status"] == "DONE"

        view = api.get(f"/v0/tasks/{task_id}").json()
        assert view["status"] == "DONE" and view["score"] == 0.6 and view["n_results"] == 4
        r4 = [r for r in view["results"] if r["id"] == done.json()["result_id"]][0]
        assert r4["counted"] is False and r4["outlier"] is False
        assert view["canary"]["checks"] == [{"result_id": r4["id"], "passed": True}]
        row = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()["rows"][0]
        assert row["score"] == 0.6 and row["n_tasks"] == 1 and row["n_samples"] == 5
        rows = api.get("/v0/log/entries", params={"start": 0}).json()
        entry = rows[0]["entry"]
        assert entry["canary"]["checks"] == view["canary"]["checks"]
        assert len(entry["results"]) == 4 and entry["consensus"]["score"] == 0.6
        assert entry["consensus"]["sample_consensus"] == list(TRUTH)
        assert entry["consensus"]["tolerance"] == ctx.settings.sample_tolerance == 0.2
        assert check_canaries(rows) == []
        assert _runner(ctx, "r4").agreements == 1 and _runner(ctx, "r4").outliers == 0
        assert _runner(ctx, "r1").agreements == 1 and _runner(ctx, "r2").agreements == 1


@pytest.mark.parametrize(
    ("samples", "passed"),
    [(SLIP, True), (FLIPPED, False)],
    ids=["one-slip", "two-flipped-same-score"],
)
def test_a_canary_is_checked_sample_by_sample(make_ctx, samples, passed):
    ctx, people = _world(make_ctx)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        _settle(api, people)
        done = submit_samples(api, people, "r4", pull(api, people, "r4").json(), samples)
        assert done.json()["task_status"] == "DONE"
        rows = api.get("/v0/log/entries", params={"start": 0}).json()
        assert rows[0]["entry"]["canary"]["checks"] == [
            {"result_id": done.json()["result_id"], "passed": passed}
        ]
        assert check_canaries(rows) == []  # the verifier recomputes the same
        r4 = _runner(ctx, "r4")
        assert (r4.agreements, r4.outliers) == ((1, 0) if passed else (0, 1))
        # the verifier recomputes it from the logged vectors: a changed one is caught
        canary = next(r for r in rows[0]["entry"]["results"] if not r["counted"])
        canary["sample_scores"] = list(FLIPPED if passed else TRUTH)
        assert "recomputed" in check_canaries(rows)[0].what


def test_a_canary_settled_before_the_per_sample_rule_is_checked_on_scores(make_ctx):
    ctx, people = _world(make_ctx)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        leases, _ = _settle(api, people)
        task_id = leases["r1"]["task"]["id"]
        # a verdict stored by the previous release has no tolerance or epsilon
        with ctx.db.write() as session:
            canary = dict(session.get_one(Task, task_id).canary)
            verdict = {
                k: v for k, v in canary["verdict"].items() if k not in ("tolerance", "epsilon")
            }
            session.execute(
                update(Task).where(Task.id == task_id).values(canary={**canary, "verdict": verdict})
            )
        done = submit_samples(api, people, "r4", pull(api, people, "r4").json(), FLIPPED)
        rows = api.get("/v0/log/entries", params={"start": 0}).json()
        # the score rule of then: 0.6 among 0.6-0.8 passes
        assert rows[0]["entry"]["canary"]["checks"] == [
            {"result_id": done.json()["result_id"], "passed": True}
        ]
        assert rows[0]["entry"]["consensus"]["tolerance"] is None
        assert check_canaries(rows) == []


def test_a_wrong_canary_answer_costs_reputation_and_changes_no_score(make_ctx):
    ctx, people = _world(make_ctx, outlier_limit=1)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        leases, _ = _settle(api, people)
        canary = pull(api, people, "r4").json()
        # the same score as the consensus, but two answers flipped
        done = submit_samples(api, people, "r4", canary, FLIPPED)
        assert done.json()["task_status"] == "DONE"
        view = api.get(f"/v0/tasks/{leases['r1']['task']['id']}").json()
        assert view["score"] == 0.6
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
        assert row["score"] == 0.6 and row["n_tasks"] == 1


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
        assert view["status"] == "DONE" and view["score"] == 0.6
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
