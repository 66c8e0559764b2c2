"""The HTTP API end to end on SQLite: registration, leasing, consensus, leaderboard."""

from __future__ import annotations

import csv
import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from quorumbench.api.app import create_app
from quorumbench.core.canonical import predictions_digest
from quorumbench.db.models import Model, Result
from quorumbench.services.scheduler import tick

from ..signing import Keyring
from .conftest import fake_metadata, hub_ref


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(api, people, ref, who="owner"):
    return api.post("/v0/models", json={"ref": ref}, headers=auth(people[who]))


def pull(api, people, who):
    return api.post("/v0/leases", json={"runner": f"{who}-box"}, headers=auth(people[who]))


def payload(lease, score_per_sample):
    task = lease["task"]
    scores = [score_per_sample] * task["n_samples"]
    return {
        "attempt": lease["attempt"],
        "result": {
            "task_id": task["id"],
            "score": score_per_sample,
            "n": task["n_samples"],
            "sample_ids": task["sample_ids"],
            "sample_scores": scores,
            "sample_output_hashes": ["0" * 64] * task["n_samples"],
            "outputs_sha256": "a" * 64,
            "sample_predictions": [0] * task["n_samples"],
            "predictions_sha256": predictions_digest([0] * task["n_samples"]),
            "runtime_s": 1.5,
            "hardware": {"hardware": {"cpu_count": 2}},
        },
    }


def signed(api, people, who, lease, body):
    """``body`` with the runner's signature over its result (made at the server's time)."""
    if not hasattr(api, "keyring"):
        api.keyring = Keyring(api.post, lambda: api.app.state.context.now())
    body["signature"] = api.keyring.sign(people[who], f"{who}-box", lease, body["result"])
    return body


def submit(api, people, who, lease, score):
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=signed(api, people, who, lease, payload(lease, score)),
        headers=auth(people[who]),
    )


def assert_problem(response, status, code, text=""):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"/problems/{code}"
    assert body["status"] == status
    assert text in body["detail"]
    assert set(body) >= {"type", "title", "status", "detail", "instance"}
    return body


def test_three_runners_reach_consensus(api, people, ctx):
    assert register(api, people, hub_ref(1)).status_code == 201
    tasks = api.get("/v0/tasks", params={"status": "PENDING"}).json()
    assert len(tasks) == 1 and tasks[0]["quorum"] == 3
    assert pull(api, people, "owner").status_code == 204  # nobody evaluates their own model
    leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
    assert pull(api, people, "r1").status_code == 204  # one slot per account
    assert pull(api, people, "r4").status_code == 204  # all three slots are leased
    assert submit(api, people, "r1", leases["r1"], 0.5).status_code == 201
    assert submit(api, people, "r2", leases["r2"], 0.5).status_code == 201
    # 0.505 on every sample: within the per-sample epsilon (0.01) of 0.5
    done = submit(api, people, "r3", leases["r3"], 0.505)
    assert done.status_code == 201
    assert done.json()["task_status"] == "DONE"
    again = submit(api, people, "r3", leases["r3"], 0.505)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    task = api.get(f"/v0/tasks/{done.json()['task_id']}").json()
    assert task["status"] == "DONE" and task["score"] == 0.5
    assert len(task["results"]) == 3
    assert task["outcomes"][0]["sample_agreement"] == [1.0] * 4
    board = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()
    row = board["rows"][0]
    assert {
        "model",
        "benchmark",
        "score",
        "ci_low",
        "ci_high",
        "n_samples",
        "n_tasks",
        "updated_at",
    } <= set(row)
    assert row["score"] == 0.5 and row["n_samples"] == 4 and row["n_tasks"] == 1
    assert row["pillar"] == "math" and row["chance"] == 0.0  # arith is generative
    assert row["normalised"]["score"] == 0.5
    assert (row["normalised"]["ci_low"], row["normalised"]["ci_high"]) == (
        row["ci_low"],
        row["ci_high"],
    )
    # the tests' servers weight the math pillar only (conftest.py): arith makes it
    (ranked,) = api.get("/v0/leaderboard").json()["rows"]
    assert ranked["benchmark"] == "aggregate" and ranked["rank"] == 1
    assert ranked["pillars"]["math"]["score"] == 0.5 and ranked["missing_pillars"] == []
    assert ranked["score"] == 0.5
    text = api.get("/v0/leaderboard", params={"benchmark": "arith", "format": "csv"}).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["model"] == row["model"] and float(rows[0]["score"]) == 0.5


def test_a_model_shows_the_engine_that_evaluates_it(api, people, ctx):
    registered = register(api, people, hub_ref(40))
    assert registered.status_code == 201, registered.text
    model_id = registered.json()["id"]
    assert registered.json()["engine"] == "transformers"
    with ctx.db.write() as session:  # as a GGUF model's, and a plugin scheme's (none)
        session.execute(update(Model).where(Model.id == model_id).values(engine="llamacpp"))
    assert api.get(f"/v0/models/{model_id}").json()["engine"] == "llamacpp"
    with ctx.db.write() as session:
        session.execute(update(Model).where(Model.id == model_id).values(engine=None))
    listed = {m["id"]: m for m in api.get("/v0/models").json()}
    assert listed[model_id]["engine"] is None


def test_a_changed_resubmission_is_a_conflict(api, people):
    register(api, people, hub_ref(2))
    lease = pull(api, people, "r1").json()
    submit(api, people, "r1", lease, 0.5)
    assert_problem(submit(api, people, "r1", lease, 0.25), 409, "conflict", "different result")


def test_disagreement_requeues_with_a_larger_quorum(api, people, ctx):
    register(api, people, hub_ref(3))
    leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
    submit(api, people, "r1", leases["r1"], 0.0)
    submit(api, people, "r2", leases["r2"], 0.0)
    disputed = submit(api, people, "r3", leases["r3"], 1.0).json()
    assert disputed["task_status"] == "DISPUTED" and disputed["round"] == 2
    task = api.get(f"/v0/tasks/{disputed['task_id']}").json()
    assert task["quorum"] == 5 and task["final"] is False and task["results"] == []
    more = {who: pull(api, people, who).json() for who in ("r4", "r5")}
    submit(api, people, "r4", more["r4"], 0.0)
    # 0.25 is within the score threshold (0.5) of the others, but every one of its
    # samples lies 0.25 from the per-sample consensus (0.0): an outlier as well
    final = submit(api, people, "r5", more["r5"], 0.25).json()
    assert final["task_status"] == "DONE"
    task = api.get(f"/v0/tasks/{final['task_id']}").json()
    assert task["score"] == 0.0
    outliers = [r for r in task["results"] if r["outlier"]]
    assert sorted(r["score"] for r in outliers) == [0.25, 1.0]


def test_a_task_stays_disputed_after_the_last_round(ctx, people):
    ctx.inspector = lambda ref: fake_metadata(ref)
    app = create_app(
        ctx.settings.model_copy(update={"max_rounds": 1}), context=ctx, run_scheduler=False
    )
    ctx.settings = ctx.settings.model_copy(update={"max_rounds": 1})
    with TestClient(app) as api:
        register(api, people, hub_ref(4))
        leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
        for who, score in (("r1", 0.0), ("r2", 1.0), ("r3", 0.5 + 0.25)):
            last = submit(api, people, who, leases[who], score).json()
        assert last["task_status"] == "DISPUTED"
        task = api.get(f"/v0/tasks/{last['task_id']}").json()
        assert task["final"] is True and task["status"] == "DISPUTED"
        assert pull(api, people, "r4").status_code == 204


def test_expired_lease_is_refused_and_the_slot_reopens(api, people, ctx, clock):
    register(api, people, hub_ref(5))
    lease = pull(api, people, "r1").json()
    clock.advance(61)
    assert_problem(submit(api, people, "r1", lease, 0.5), 409, "lease-expired", "not counted")
    heartbeat = api.post(
        f"/v0/leases/{lease['lease_id']}/heartbeat",
        params={"runner": "r1-box"},
        json={"attempt": lease["attempt"]},
        headers=auth(people["r1"]),
    )
    assert_problem(heartbeat, 409, "lease-expired")
    tick(ctx)  # expires it and reopens the slot
    again = pull(api, people, "r1").json()
    assert again["task"]["id"] == lease["task"]["id"]
    assert again["attempt"] > lease["attempt"]


def test_heartbeat_extends_and_release_reopens(api, people, clock):
    register(api, people, hub_ref(6))
    lease = pull(api, people, "r1").json()
    clock.advance(50)
    beat = api.post(
        f"/v0/leases/{lease['lease_id']}/heartbeat",
        params={"runner": "r1-box"},
        json={"attempt": lease["attempt"]},
        headers=auth(people["r1"]),
    )
    assert beat.status_code == 200
    clock.advance(50)  # past the original expiry, inside the extended one
    assert submit(api, people, "r1", lease, 0.5).status_code == 201
    other = pull(api, people, "r2").json()
    released = api.delete(
        f"/v0/leases/{other['lease_id']}",
        params={"attempt": other["attempt"], "runner": "r2-box"},
        headers=auth(people["r2"]),
    )
    assert released.status_code == 204
    assert pull(api, people, "r2").json()["task"]["id"] == other["task"]["id"]


def test_a_result_for_other_samples_is_rejected(api, people):
    register(api, people, hub_ref(7))
    lease = pull(api, people, "r1").json()
    body = payload(lease, 0.5)
    body["result"]["sample_ids"] = list(reversed(body["result"]["sample_ids"]))
    body["result"]["score"] = 0.9
    response = api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": "r1-box"},
        json=signed(api, people, "r1", lease, body),
        headers=auth(people["r1"]),
    )
    problem = assert_problem(response, 422, "invalid-submission", "sample_ids differ")
    assert "score is not the mean" in problem["detail"]


def test_registration_refusals_say_why(api, people, ctx):
    first = register(api, people, hub_ref(10)).json()
    again = register(api, people, hub_ref(10))  # the owner's own repeat: the same model
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    body = assert_problem(
        register(api, people, hub_ref(10), who="r1"), 409, "duplicate-model", "registered already"
    )
    assert body["existing_model_id"] == first["id"]
    assert body["report"]["existing"] == {
        "id": first["id"],
        "ref": first["ref"],
        "name": first["name"],
        "url": f"/models/{first['id']}",
        "yours": False,
        "retired": False,
    }
    same_weights = first["weights_sha256"]
    ctx.inspector = lambda ref: fake_metadata(ref, weights=same_weights)
    assert_problem(register(api, people, hub_ref(11)), 409, "duplicate-model", "weights")
    ctx.inspector = lambda ref: fake_metadata(ref, params=10**12)
    assert_problem(register(api, people, hub_ref(12)), 422, "registration-refused", "at most")
    ctx.inspector = lambda ref: fake_metadata(ref)
    register(api, people, hub_ref(13))
    register(api, people, hub_ref(14))
    assert_problem(register(api, people, hub_ref(15)), 429, "rate-limited", "3 per week")
    assert register(api, people, hub_ref(16), who="admin").status_code == 201  # admins exempt
    assert_problem(api.post("/v0/models", json={"ref": hub_ref(17)}), 401, "unauthenticated")
    bad = api.post("/v0/models", json={"ref": hub_ref(17)}, headers=auth("qb_nope"))
    assert_problem(bad, 401, "unauthenticated", "unknown API token")


def test_quota_earn_your_submit(make_ctx, tmp_path):
    from quorumbench.services.accounts import Principal, create_account
    from quorumbench.services.models import register_model

    ctx = make_ctx(f"sqlite:///{tmp_path / 'quota.db'}", quota_evaluations=3)
    account = create_account(ctx, "newcomer")
    principal = Principal(account.id, "newcomer", False, frozenset({"model:register"}))
    with pytest.raises(Exception, match="earn your submit.*this account has 0"):
        register_model(ctx, principal, hub_ref(20), inspector=fake_metadata)


def test_scopes_are_enforced(api, people, ctx):
    from quorumbench.services.accounts import issue_token

    pull_only = issue_token(ctx, "r1", scopes=("task:pull",)).token
    assert_problem(
        api.post("/v0/models", json={"ref": hub_ref(30)}, headers=auth(pull_only)),
        403,
        "forbidden",
        "model:register",
    )


def test_request_validation_is_problem_json(api, people):
    response = api.post("/v0/models", json={"nope": 1}, headers=auth(people["owner"]))
    body = assert_problem(response, 422, "invalid-request", "ref")
    assert any(e["loc"][-1] == "ref" for e in body["errors"])


def test_epoch_seed_is_committed_then_revealed(api, ctx, clock):
    import hashlib

    current = api.get("/v0/epochs/current").json()
    assert current["seed"] is None
    clock.advance(ctx.settings.epoch_seconds)
    revealed = api.get(f"/v0/epochs/{current['id']}").json()
    assert hashlib.sha256(revealed["seed"].encode()).hexdigest() == current["seed_commitment"]


def test_openapi_and_health(api):
    assert api.get("/v0/health").json()["status"] == "ok"
    spec = api.get("/openapi.json").json()
    assert "/v0/leases" in spec["paths"] and "/v0/leaderboard" in spec["paths"]


def test_revoking_a_cached_token_takes_effect_at_once(api, people, ctx):
    from datetime import timedelta

    from quorumbench.services.accounts import issue_token, revoke_token

    short = issue_token(ctx, "r1", expires_in=timedelta(minutes=5)).token
    assert pull(api, {"r1": short}, "r1").status_code == 204  # now remembered
    ctx.clock.advance(301)  # past its expiry: the remembered principal is not used
    assert_problem(pull(api, {"r1": short}, "r1"), 401, "unauthenticated", "expired")

    assert pull(api, people, "r2").status_code == 204
    revoke_token(ctx, people["r2"][:10])
    assert_problem(pull(api, people, "r2"), 401, "unauthenticated", "revoked")


def test_an_outlier_runner_is_suspended_at_once_and_its_late_results_do_not_count(
    make_ctx, tmp_path
):
    from quorumbench.services.accounts import create_account, issue_token

    ctx = make_ctx(outlier_limit=1)
    ctx.inspector = lambda ref: fake_metadata(ref)
    create_account(ctx, "owner")
    people = {n: issue_token(ctx, n).token for n in ("owner",)}
    for name in ("r1", "r2", "r3", "r4", "r5"):
        create_account(ctx, name)
        people[name] = issue_token(ctx, name).token
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        register(api, people, hub_ref(1))
        register(api, people, hub_ref(2))
        first = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
        second = pull(api, people, "r3").json()  # r3 holds a lease of the other task too
        assert first["r3"]["task"]["id"] != second["task"]["id"]
        submit(api, people, "r1", first["r1"], 1.0)
        submit(api, people, "r2", first["r2"], 1.0)
        assert submit(api, people, "r3", first["r3"], 0.0).json()["task_status"] == "DISPUTED"
        extra = {who: pull(api, people, who).json() for who in ("r4", "r5")}
        assert {lease["task"]["id"] for lease in extra.values()} == {first["r1"]["task"]["id"]}
        submit(api, people, "r4", extra["r4"], 1.0)
        assert submit(api, people, "r5", extra["r5"], 1.0).json()["task_status"] == "DONE"

        # r3 disagreed with consensus once (the limit here): suspended, and its cached
        # identity is forgotten, so the very next pull is refused.
        assert_problem(pull(api, people, "r3"), 403, "forbidden", "suspended")
        late = submit(api, people, "r3", second, 1.0)
        assert late.status_code == 201, late.text
        task = api.get(f"/v0/tasks/{second['task']['id']}").json()
        assert task["final"] is False and task["n_results"] is None  # no count while open
        with ctx.db.read() as session:
            stored = session.scalars(select(Result).where(Result.task_id == task["id"])).all()
        assert [r.counted for r in stored] == [False]  # stored, not counted


def submit_and_pull(api, people, who, lease, score, key, token=None):
    body = signed(api, people, who, lease, payload(lease, score)) | {"next_pull_key": key}
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=body,
        headers=auth(token or people[who]),
    )


def test_a_submission_can_lease_the_next_task_in_the_same_request(api, people):
    register(api, people, hub_ref(40))
    register(api, people, hub_ref(41))
    first = pull(api, people, "r1").json()
    answer = submit_and_pull(api, people, "r1", first, 0.5, "next-key-0001")
    assert answer.status_code == 201, answer.text
    after = answer.json()["next"]
    assert after["task"]["id"] != first["task"]["id"] and after["attempt"] == 1
    # A retry of the whole request (its answer lost) stores nothing new and gives
    # back the same next lease: the pull key makes that pull idempotent too.
    again = submit_and_pull(api, people, "r1", first, 0.5, "next-key-0001")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["next"]["lease_id"] == after["lease_id"]
    last = submit_and_pull(api, people, "r1", after, 0.5, "next-key-0002")
    assert last.status_code == 201 and last.json()["next"] is None  # nothing left for r1
    assert pull(api, people, "r1").status_code == 204


def test_pulling_with_a_submission_needs_the_pull_scope_and_stores_nothing_without_it(
    api, people, ctx
):
    from quorumbench.services.accounts import issue_token

    register(api, people, hub_ref(42))
    lease = pull(api, people, "r2").json()
    submit_only = issue_token(ctx, "r2", scopes=("task:submit",)).token
    refused = submit_and_pull(api, people, "r2", lease, 0.5, "next-key-0003", submit_only)
    assert_problem(refused, 403, "forbidden", "task:pull")
    stored = submit(api, people, "r2", lease, 0.5)
    assert stored.status_code == 201 and stored.json()["next"] is None  # the first store


def test_a_reported_failure_ends_the_lease_and_the_task_goes_to_others(api, people, ctx):
    from quorumbench.db.models import Lease

    register(api, people, hub_ref(3))
    lease = pull(api, people, "r1").json()
    url = f"/v0/leases/{lease['lease_id']}/failure"
    body = {"attempt": lease["attempt"], "reason": "sandbox: killed after 30 s (wall time)"}
    params = {"runner": "r1-box"}
    assert_problem(api.post(url, params=params, json=body), 401, "unauthenticated")
    someone_else = api.post(url, params={"runner": "r2-box"}, json=body, headers=auth(people["r2"]))
    assert someone_else.status_code == 404
    too_long = {**body, "reason": "x" * 501}
    assert (
        api.post(url, params=params, json=too_long, headers=auth(people["r1"])).status_code == 422
    )
    stale = {**body, "attempt": lease["attempt"] + 1}
    assert api.post(url, params=params, json=stale, headers=auth(people["r1"])).status_code == 409
    done = api.post(url, params=params, json=body, headers=auth(people["r1"]))
    assert done.status_code == 204, done.text
    with ctx.db.read() as session:
        row = session.get_one(Lease, lease["lease_id"])
        assert (row.state, row.failure) == ("FAILED", body["reason"])
    # r1's account is not offered the task again; the freed slot goes to another account
    assert pull(api, people, "r1").status_code == 204
    assert pull(api, people, "r2").json()["task"]["id"] == lease["task"]["id"]
    # a failed lease cannot submit
    assert submit(api, people, "r1", lease, 0.5).status_code == 409


def test_lease_calls_under_an_unknown_runner_name_make_no_runner(api, people, ctx):
    """Only a pull (or a key registration) makes a runner: a heartbeat, release, failure
    report or submission under a name the account never pulled with holds no lease."""
    from sqlalchemy import func, select

    from quorumbench.db.models import Runner

    register(api, people, hub_ref(4))
    lease = pull(api, people, "r1").json()
    base = f"/v0/leases/{lease['lease_id']}"
    params, headers = {"runner": "never-pulled"}, auth(people["r1"])
    attempt = {"attempt": lease["attempt"]}
    with ctx.db.read() as session:
        before = session.scalar(select(func.count()).select_from(Runner))
    answers = [
        api.post(f"{base}/heartbeat", params=params, json=attempt, headers=headers),
        api.delete(base, params={**params, **attempt}, headers=headers),
        api.post(
            f"{base}/failure", params=params, json={**attempt, "reason": "x"}, headers=headers
        ),
        api.post(
            f"{base}/result",
            params=params,
            json=signed(api, people, "r1", lease, payload(lease, 1.0)),
            headers=headers,
        ),
    ]
    for answer in answers:
        assert_problem(answer, 404, "not-found")
        assert "no runner 'never-pulled'" in answer.json()["detail"]
    with ctx.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Runner)) == before
        assert session.scalars(select(Runner).where(Runner.name == "never-pulled")).first() is None
    # the lease itself is untouched: its own runner still renews it
    renewed = api.post(
        f"{base}/heartbeat", params={"runner": "r1-box"}, json=attempt, headers=headers
    )
    assert renewed.status_code == 200, renewed.text
