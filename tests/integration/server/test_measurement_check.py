"""The measurement cross-check at finalization (SQLite and PostgreSQL): per hardware
class statistics of a DONE task's agreeing results, a runner reporting 10× the energy
of its class flagged on its page and in the runners list, classes never compared with
each other, and scores, consensus and reputation as they would be without it."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from quorumbench.db.measurement_models import TaskMeasurement
from quorumbench.db.models import ConsensusOutcome, Result, Runner, Task

from .conftest import hub_ref
from .test_api import auth, payload, pull, register, signed

EPYC = {"cpu_model": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 2}
H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "cpu_count": 16}
BASE = {
    "wall_s": 2.0,
    "energy_kwh": 1e-05,
    "energy_method": "estimate",
    "ttft_s": 0.1,
    "decode_tokens_per_s": 40.0,
    "peak_rss_bytes": 1_000_000_000,
}
RUNNERS = ("r1", "r2", "r3")


@pytest.fixture
def ctx(make_ctx, db_url):
    return make_ctx(db_url)


def _submit(api, people, who, lease, machine, measurements):
    body = payload(lease, 0.5)
    body["result"]["hardware"] = {"hardware": machine}
    if measurements is not None:
        body["result"]["measurements"] = measurements
    answer = api.post(
        f"/v0/leases/{lease['lease_id']}/result",
        params={"runner": f"{who}-box"},
        json=signed(api, people, who, lease, body),
        headers=auth(people[who]),
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


def _run_task(api, people, sent, ref=81, before_last=None):
    """Three runners evaluate one task; ``sent`` maps each to (machine, measurements)."""
    assert register(api, people, hub_ref(ref)).status_code == 201
    leases = {who: pull(api, people, who).json() for who in RUNNERS}
    task_id = leases["r1"]["task"]["id"]
    assert {lease["task"]["id"] for lease in leases.values()} == {task_id}
    for who in RUNNERS:
        if who == RUNNERS[-1] and before_last is not None:
            before_last()
        _submit(api, people, who, leases[who], *sent[who])
    return task_id


def _results(ctx, task_id):
    with ctx.db.read() as session:
        return {
            r.runner_id: r for r in session.scalars(select(Result).where(Result.task_id == task_id))
        }


def _stats(ctx, task_id):
    with ctx.db.read() as session:
        rows = session.scalars(select(TaskMeasurement).where(TaskMeasurement.task_id == task_id))
        return {row.hardware_class: row for row in rows}


def _runner_id(ctx, who):
    with ctx.db.read() as session:
        return session.scalar(select(Runner.id).where(Runner.name == f"{who}-box"))


def _consensus_unchanged(ctx, task_id):
    """Score consensus and reputation as without measurements: all three agree."""
    with ctx.db.read() as session:
        task = session.get(Task, task_id)
        assert task is not None and task.status == "DONE" and task.score == 0.5
        outcome = session.scalars(
            select(ConsensusOutcome).where(ConsensusOutcome.task_id == task_id)
        ).one()
        assert len(outcome.agreeing) == 3 and outcome.outliers == []
        assert not any(r.outlier for r in session.scalars(select(Result)))
        runners = session.scalars(select(Runner)).all()
        assert (
            sorted((r.agreements, r.outliers, r.suspended) for r in runners) == [(1, 0, False)] * 3
        )


def test_a_runner_with_ten_times_the_energy_is_flagged_on_its_page(api, people, ctx):
    heavy = BASE | {"energy_kwh": 1e-04}
    sent = {"r1": (EPYC, BASE), "r2": (EPYC, BASE), "r3": (EPYC, heavy)}
    task_id = _run_task(api, people, sent)
    results = _results(ctx, task_id)
    flagged = {_runner_id(ctx, who): results[_runner_id(ctx, who)] for who in RUNNERS}
    cls = "cpu:amd-epyc-7b13:2c"
    assert {r.hardware_class for r in results.values()} == {cls}
    assert [r.measurement_outlier for r in flagged.values()] == [False, False, True]
    stats = _stats(ctx, task_id)
    assert list(stats) == [cls]
    row = stats[cls]
    assert (row.n, row.flagged) == (3, 1)
    assert row.energy_kwh_per_sample_median == pytest.approx(1e-05 / 4)  # 4 samples a task
    assert row.energy_kwh_per_sample_spread == 0.0
    assert row.decode_tokens_per_s_median == 40.0 and row.ttft_s_median == 0.1
    assert row.peak_rss_bytes_median == 1e9 and row.peak_rss_bytes_spread == 0.0
    _consensus_unchanged(ctx, task_id)

    r3 = _runner_id(ctx, "r3")
    page = api.get(f"/runners/{r3}")
    assert page.status_code == 200
    html = page.text
    assert '<dd id="measurement-flags">1</dd>' in html
    assert f'href="/tasks/{task_id}"' in html and cls in html
    assert "2.5e-05" in html and "2.5e-06" in html and "10.00" in html  # mine, median, ×
    assert "do not affect scores, consensus or reputation" in html
    shown = api.get(f"/runners/{r3}", params={"format": "json"}).json()
    assert shown["runner"]["measurement_flags"] == 1
    (flag,) = shown["flagged"]
    assert flag["task_id"] == task_id and flag["hardware_class"] == cls
    assert flag["ratio"] == pytest.approx(10.0) and flag["class_results"] == 3
    calm = api.get(f"/runners/{_runner_id(ctx, 'r1')}").text
    assert '<dd id="measurement-flags">0</dd>' in calm and "No flagged results." in calm
    listed = api.get("/runners", params={"format": "json"}).json()["runners"]
    assert {r["name"]: r["measurement_flags"] for r in listed} == {
        "r1-box": 0,
        "r2-box": 0,
        "r3-box": 1,
    }
    assert f'href="/runners/{r3}"' in api.get("/runners").text
    assert api.get("/runners/999999").status_code == 404
    # the log's entry has the measurements as sent, and no flag or class of the server's
    entry = api.get("/v0/log/entries", params={"start": 0, "limit": 10}).json()[0]["entry"]
    logged = {r["runner_id"]: r for r in entry["results"]}
    assert logged[r3]["measurements"] == heavy
    assert not {"measurement_outlier", "hardware_class"} & set(logged[r3])


def test_hardware_classes_are_not_compared(api, people, ctx):
    heavy = BASE | {"energy_kwh": 1e-04}
    sent = {"r1": (EPYC, BASE), "r2": (EPYC, BASE), "r3": (H100, heavy)}
    task_id = _run_task(api, people, sent, ref=82)
    assert not any(r.measurement_outlier for r in _results(ctx, task_id).values())
    stats = _stats(ctx, task_id)
    assert {cls: (row.n, row.flagged) for cls, row in stats.items()} == {
        "cpu:amd-epyc-7b13:2c": (2, 0),
        "gpu:nvidia-h100-80gb-hbm3": (1, 0),
    }
    assert stats["gpu:nvidia-h100-80gb-hbm3"].energy_kwh_per_sample_median == pytest.approx(2.5e-05)
    _consensus_unchanged(ctx, task_id)


def test_results_without_measurements_are_not_checked(api, people, ctx):
    bare = {"cpu_count": 2}  # no CPU model: class unknown, never compared
    no_energy = BASE | {"energy_kwh": None, "energy_method": "none"}
    sent = {"r1": (EPYC, None), "r2": (bare, BASE), "r3": (EPYC, no_energy)}
    task_id = _run_task(api, people, sent, ref=83)
    assert not any(r.measurement_outlier for r in _results(ctx, task_id).values())
    (row,) = _stats(ctx, task_id).values()  # r3 alone: r1 sent none, r2's class is unknown
    assert row.hardware_class == "cpu:amd-epyc-7b13:2c" and row.n == 1
    assert row.energy_kwh_per_sample_median is None  # measured with method none
    assert row.decode_tokens_per_s_median == 40.0
    entry = api.get("/v0/log/entries", params={"start": 0, "limit": 10}).json()[0]["entry"]
    assert sum("measurements" in r for r in entry["results"]) == 2
    _consensus_unchanged(ctx, task_id)


def test_a_result_stored_before_its_class_was_kept_is_classed_at_finalization(api, people, ctx):
    def forget_classes():  # as results stored before migration 0024
        with ctx.db.write_connection() as conn:
            conn.execute(update(Result).values(hardware_class=None))

    heavy = BASE | {"energy_kwh": 1e-04}
    sent = {"r1": (EPYC, heavy), "r2": (EPYC, BASE), "r3": (EPYC, BASE)}
    task_id = _run_task(api, people, sent, ref=84, before_last=forget_classes)
    results = _results(ctx, task_id)
    assert {r.hardware_class for r in results.values()} == {"cpu:amd-epyc-7b13:2c"}
    assert results[_runner_id(ctx, "r1")].measurement_outlier
    assert sum(r.measurement_outlier for r in results.values()) == 1
