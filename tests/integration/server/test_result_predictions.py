"""Results carry their canonical predictions: the server checks them against their
digest and the task, stores them, shows the digest and logs both (SQLite and
PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from quorumbench.core.canonical import predictions_digest
from quorumbench.db.models import LogEntry, Result

from .conftest import hub_ref
from .test_api import assert_problem, auth, payload, pull, register, signed


@pytest.fixture
def ctx(make_ctx, db_url):
    """Every test here on SQLite and on PostgreSQL."""
    return make_ctx(db_url)


def post(api, people, who, lease, body):
    return api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=signed(api, people, who, lease, body),
        headers=auth(people[who]),
    )


def with_predictions(body, predictions, digest=None):
    body["result"]["sample_predictions"] = predictions
    body["result"]["predictions_sha256"] = digest or predictions_digest(predictions)
    return body


@pytest.fixture
def lease(api, people):
    register(api, people, hub_ref(70))
    return pull(api, people, "r1").json()


def test_predictions_are_stored_shown_and_logged(api, people, ctx):
    register(api, people, hub_ref(71))
    leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
    n = leases["r1"]["task"]["n_samples"]
    predictions = {"r1": [0] * n, "r2": [0] * n, "r3": ["é\x00\n"] + [None] * (n - 1)}
    for who, lease in leases.items():
        body = with_predictions(payload(lease, 0.5), predictions[who])
        answer = post(api, people, who, lease, body)
        assert answer.status_code == 201, answer.text
    task_id = answer.json()["task_id"]
    with ctx.db.read() as session:
        rows = session.execute(
            select(Result.sample_predictions, Result.predictions_sha256)
            .where(Result.task_id == task_id)
            .order_by(Result.id)
        ).all()
        entry = session.scalars(select(LogEntry.entry).where(LogEntry.task_id == task_id)).one()
    assert [list(r) for r in rows] == [[p, predictions_digest(p)] for p in predictions.values()]
    logged = [(r["sample_predictions"], r["predictions_sha256"]) for r in entry["results"]]
    assert logged == [(p, predictions_digest(p)) for p in predictions.values()]
    task = api.get(f"/v0/tasks/{task_id}").json()
    shown = [r["predictions_sha256"] for r in task["results"]]
    assert shown == [predictions_digest(p) for p in predictions.values()]
    page = api.get(f"/tasks/{task_id}").text
    assert f'<code class="predictions" title="{shown[2]}">{shown[2][:12]}…</code>' in page


def test_a_digest_that_does_not_match_the_predictions_is_refused(api, people, lease):
    n = lease["task"]["n_samples"]
    body = with_predictions(payload(lease, 0.5), [0] * n, predictions_digest([1] * n))
    answer = post(api, people, "r1", lease, body)
    assert_problem(answer, 422, "invalid-submission", "predictions_sha256 is not the SHA-256")
    with_predictions(body, [0] * n)
    assert post(api, people, "r1", lease, body).status_code == 201  # nothing was stored


@pytest.mark.parametrize("delta", [-1, 1])
def test_one_prediction_per_sample_is_required(api, people, lease, delta):
    n = lease["task"]["n_samples"]
    body = with_predictions(payload(lease, 0.5), [0] * (n + delta))
    answer = post(api, people, "r1", lease, body)
    detail = f"sample_predictions has {n + delta} entries, the result has n={n}"
    assert_problem(answer, 422, "invalid-submission", detail)


def test_a_result_from_an_older_runner_is_refused_with_the_upgrade_named(api, people, lease):
    old = payload(lease, 0.5)
    del old["result"]["sample_predictions"], old["result"]["predictions_sha256"]
    answer = post(api, people, "r1", lease, old)
    body = assert_problem(answer, 422, "invalid-submission", "no sample_predictions")
    assert "upgrade quorumbench on the runner" in body["detail"]
    half = payload(lease, 0.5)
    del half["result"]["predictions_sha256"]
    answer = post(api, people, "r1", lease, half)
    assert_problem(answer, 422, "invalid-submission", "predictions_sha256 is missing")


@pytest.mark.parametrize("bad", [True, 1.0, [0], {"a": 0}])
def test_a_prediction_is_an_integer_a_string_or_null(api, people, lease, bad):
    n = lease["task"]["n_samples"]
    body = with_predictions(payload(lease, 0.5), [bad] + [0] * (n - 1))
    answer = post(api, people, "r1", lease, body)
    assert_problem(answer, 422, "invalid-request", "sample_predictions")


def test_the_signature_covers_the_predictions(api, people, lease):
    n = lease["task"]["n_samples"]
    body = signed(api, people, "r1", lease, with_predictions(payload(lease, 0.5), [0] * n))
    with_predictions(body, [1] * n)  # changed after signing, its digest made to match
    answer = api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": "r1-box"},
        json=body,
        headers=auth(people["r1"]),
    )
    assert_problem(answer, 422, "invalid-signature")
