"""The ask cache (``services/label_cache.py``, ``services/ask_cache.py``) on SQLite and
PostgreSQL: answers equal a brute-force recomputation from the stored per-sample
results, the incremental rows equal the backfill's, the backfill is idempotent, and
the interval is the exact one of the slice's sum and count.

Tasks finalize through ``submit_result`` (three identical votes), so the cache rows
are the ones the finalizing transaction writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from sqlalchemy import and_, delete, select, update

from quorumbench.core.intervals import score_interval
from quorumbench.core.plans import ModelSelection, Plan, parse_plan
from quorumbench.core.ranking import standings
from quorumbench.db.label_models import LabelAggregate, LabelCachedTask
from quorumbench.db.models import Benchmark, ConsensusOutcome, Model, Task
from quorumbench.protocol import TaskStatus
from quorumbench.services.ask_cache import answer
from quorumbench.services.label_cache import backfill

from ..server.conftest import (  # noqa: F401  (fixtures)
    FakeClock,
    clock,
    context_on,
    db_url,
    make_ctx,
    pg_database,
    shared_db_url,
    sums_spec,
)
from ..server.test_leaderboard_aggregate import Scene
from ..sums import write_sums_spec

BENCHES = ["gen-reasoning", "gen-safety", "arith"]


@pytest.fixture
def scene(make_ctx, clock, db_url, sums_spec) -> Scene:  # noqa: F811
    return Scene(make_ctx(db_url, benchmarks=[*BENCHES, sums_spec]), clock)


@dataclass
class Filled:
    """A scene after :func:`fill`, shared by the tests that only read it."""

    scene: Scene
    models: dict[str, int]


@pytest.fixture(scope="module")
def filled(shared_db_url, tmp_path_factory, sqlite_template) -> Iterator[Filled]:  # noqa: F811
    folder = tmp_path_factory.mktemp("ask-cache")
    shared_clock = FakeClock()
    spec = write_sums_spec(folder)
    ctx = context_on(
        shared_db_url, folder, shared_clock, sqlite_template, benchmarks=[*BENCHES, spec]
    )
    try:
        scene = Scene(ctx, shared_clock)
        yield Filled(scene, fill(scene))
    finally:
        ctx.close()


def ids_of(scene: Scene, bench: str, start: int, n: int) -> list[str]:
    return list(scene.ctx.loaded_benchmarks[bench].sample_ids())[start : start + n]


def fill(scene: Scene) -> dict[str, int]:
    """Five models, tasks on four benchmarks (two with two or more label sets)."""
    models = {name: scene.model(name) for name in ("alpha", "beta", "gamma", "delta", "old")}
    pattern = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    for i, (name, model) in enumerate(models.items()):
        scores = pattern[i:] + pattern[:i]
        scene.finalize(model, "gen-reasoning", scores, ids=ids_of(scene, "gen-reasoning", i, 12))
        if name != "delta":
            scene.finalize(model, "gen-safety", scores[:8], ids=ids_of(scene, "gen-safety", 0, 8))
        scene.finalize(model, "arith", scores[:4], ids=ids_of(scene, "arith", i, 4))
        if name in ("alpha", "gamma"):  # a second task on one benchmark
            more = ids_of(scene, "gen-reasoning", 40 + i, 6)
            scene.finalize(model, "gen-reasoning", scores[:6], ids=more)
    scene.finalize(models["beta"], "sums", [1.0, 1.0, 0.0, 1.0])
    with scene.ctx.db.write() as session:
        session.execute(update(Model).where(Model.name == "alpha").values(params=500))
        session.execute(update(Model).where(Model.name == "beta").values(params=5000))
        session.execute(update(Model).where(Model.name == "old").values(retired_at=scene.clock.now))
    return models


PLANS: list[dict[str, Any]] = [
    {},
    {"labels": {"skill": ["reasoning"]}},
    {"labels": {"format": ["binary"]}},
    {"labels": {"subject": ["science"]}, "budget": 10},
    {"labels": {"subject": ["science/logic"], "format": ["mcqa"]}},
    {"pillars": ["safety"]},
    {"benchmarks": ["gen-safety", "arith"], "labels": {"skill": ["value", "reasoning"]}},
    {"labels": {"language": ["ko"]}},
    {"models": {"select": "named", "names": ["alpha", "hf:org/beta@" + "0" * 40, "nobody"]}},
    {"models": {"select": "filter", "kinds": ["hf"], "max_params": 1000}},
    {"models": {"select": "filter", "min_params": 1000}},
    {"models": {"select": "filter", "kinds": ["gguf"]}},
]


def brute_force(scene: Scene, plan: Plan) -> dict[int, dict[str, Any]]:
    """Per model, the slice's sums straight from the stored per-sample results."""
    ctx = scene.ctx
    with ctx.db.read() as session:
        rows = session.execute(
            select(
                Task.model_id,
                Task.sample_ids,
                Task.finalized_at,
                ConsensusOutcome.sample_consensus,
                Benchmark.name,
                Benchmark.pillar,
                Model.name.label("model"),
                Model.ref,
                Model.params,
            )
            .join(
                ConsensusOutcome,
                and_(ConsensusOutcome.task_id == Task.id, ConsensusOutcome.round == Task.round),
            )
            .join(Benchmark, Benchmark.id == Task.benchmark_id)
            .join(Model, Model.id == Task.model_id)
            .where(
                Task.status == TaskStatus.DONE,
                Benchmark.active,
                Model.retired_at.is_(None),
            )
        ).all()
    out: dict[int, dict[str, Any]] = {}
    wanted = plan.models
    for row in rows:
        if wanted.select == "named" and not {row.model, row.ref} & set(wanted.names):
            continue
        if wanted.select == "filter":
            if wanted.kinds and row.ref.partition(":")[0] not in wanted.kinds:
                continue
            if wanted.max_params is not None and (row.params or 10**18) > wanted.max_params:
                continue
            if wanted.min_params is not None and (row.params or -1) < wanted.min_params:
                continue
        if not plan.covers_benchmark(row.name, row.pillar):
            continue
        samples = ctx.loaded_benchmarks[row.name].samples(row.sample_ids)
        for sample, score in zip(samples, row.sample_consensus, strict=True):
            if not plan.matches(sample.labels.as_dict()):
                continue
            got = out.setdefault(
                row.model_id,
                {"n": 0, "sum": 0.0, "chance": 0.0, "benchmarks": {}, "updated": None},
            )
            got["n"] += 1
            got["sum"] += score
            got["chance"] += sample.chance
            got["benchmarks"][row.name] = got["benchmarks"].get(row.name, 0) + 1
            if got["updated"] is None or row.finalized_at > got["updated"]:
                got["updated"] = row.finalized_at
    return out


def check(scene: Scene, plan: Plan) -> None:
    with scene.ctx.db.read() as session:
        got = answer(scene.ctx, session, plan)
    expected = brute_force(scene, plan)
    assert {r.model_id for r in got.rows} == set(expected)
    intervals = {m: score_interval(e["sum"], e["n"]) for m, e in expected.items()}
    board = standings((e["sum"] / e["n"], *intervals[m]) for m, e in expected.items())
    for row in got.rows:
        e = expected[row.model_id]
        low, high = intervals[row.model_id]
        assert row.n_samples == e["n"]
        assert row.score == pytest.approx(e["sum"] / e["n"], abs=1e-12)
        assert (row.ci_low, row.ci_high) == pytest.approx((low, high), abs=1e-12)
        assert row.chance == pytest.approx(e["chance"] / e["n"], abs=1e-12)
        assert row.benchmarks == e["benchmarks"]
        assert row.updated_at == e["updated"]
        assert (row.rank, row.best, row.worst) == tuple(board.rank(row.score, low, high))
        assert row.thin == (e["n"] < plan.budget)
    assert [r.rank for r in got.rows] == sorted(r.rank for r in got.rows)
    every = brute_force(scene, replace(plan, models=ModelSelection()))  # whatever the models
    assert got.benchmarks == sorted({b for e in every.values() for b in e["benchmarks"]})
    assert got.plan_id == plan.id


@pytest.mark.parametrize("plan", PLANS, ids=[str(i) for i in range(len(PLANS))])
def test_answers_equal_a_brute_force_recomputation(filled, plan):
    check(filled.scene, parse_plan(plan))


def test_what_each_plan_selects(filled):
    scene, models = filled.scene, filled.models
    with scene.ctx.db.read() as session:
        every = answer(scene.ctx, session, parse_plan({}))
        named = answer(scene.ctx, session, parse_plan(PLANS[8]))
        small = answer(scene.ctx, session, parse_plan(PLANS[9]))
        nothing = answer(scene.ctx, session, parse_plan(PLANS[7]))
        logic = answer(scene.ctx, session, parse_plan(PLANS[4]))
    assert {r.name for r in every.rows} == {"alpha", "beta", "gamma", "delta"}  # not retired
    assert every.benchmarks == ["arith", "gen-reasoning", "gen-safety", "sums"]
    assert {r.name for r in named.rows} == {"alpha", "beta"} and named.unmeasured == []
    assert [r.name for r in small.rows] == ["alpha"]  # beta is too big, the rest unknown
    assert nothing.rows == [] and nothing.label_sets == 0 and nothing.benchmarks == []
    assert logic.label_sets == 1 and logic.benchmarks == ["gen-reasoning"]
    assert models["old"] not in {r.model_id for r in every.rows}


def test_a_named_model_without_samples_is_listed_as_unmeasured(filled):
    scene, models = filled.scene, filled.models
    plan = parse_plan(
        {
            "labels": {"format": ["code"]},
            "models": {"select": "named", "names": ["alpha", "delta"]},
        }
    )
    with scene.ctx.db.read() as session:
        got = answer(scene.ctx, session, plan)
    assert got.rows == []
    assert [(u.model_id, u.name) for u in got.unmeasured] == [
        (models["alpha"], "alpha"),
        (models["delta"], "delta"),
    ]


def test_the_interval_is_the_exact_one_of_the_slice(scene):
    a = scene.model("alpha")
    ids = ids_of(scene, "gen-reasoning", 0, 8)
    scene.finalize(a, "gen-reasoning", [0.0] * 8, ids=ids)
    with scene.ctx.db.read() as session:
        (row,) = answer(scene.ctx, session, parse_plan({})).rows
    assert (row.score, row.ci_low) == (0.0, 0.0)  # the same limits as the board's (to 1e-12)
    assert row.ci_high == pytest.approx(score_interval(0.0, 8)[1], abs=1e-12)
    assert row.ci_high == pytest.approx(0.369, abs=1e-3)  # never a point at the ends
    assert row.thin and row.rank == row.best == row.worst == 1


def cache_rows(scene: Scene) -> dict[tuple[int, int], tuple[Any, ...]]:
    with scene.ctx.db.read() as session:
        return {
            (r.label_set_id, r.model_id): (
                r.benchmark_id,
                r.n_samples,
                round(r.sample_sum, 9),
                round(r.chance_sum, 9),
                r.updated_at,
            )
            for r in session.scalars(select(LabelAggregate))
        }


def forget(scene: Scene) -> None:
    """The cache as migration 0016 leaves it: empty (the label sets may stay)."""
    with scene.ctx.db.write() as session:
        session.execute(delete(LabelAggregate))
        session.execute(delete(LabelCachedTask))


def run_backfill(scene: Scene) -> int:
    with scene.ctx.db.write() as session:
        return backfill(scene.ctx, session)


def test_incremental_equals_backfill_and_the_backfill_is_idempotent(scene):
    fill(scene)
    incremental = cache_rows(scene)
    assert incremental and run_backfill(scene) == 0  # every task is in already
    assert cache_rows(scene) == incremental
    forget(scene)
    with scene.ctx.db.read() as session:
        assert answer(scene.ctx, session, parse_plan({})).rows == []
    with scene.ctx.db.read() as session:
        done = session.scalars(select(Task.id).where(Task.status == TaskStatus.DONE)).all()
    assert run_backfill(scene) == len(done) == 17
    assert cache_rows(scene) == incremental
    assert run_backfill(scene) == 0
    assert cache_rows(scene) == incremental
    for plan in PLANS[:7]:
        check(scene, parse_plan(plan))


def test_a_task_finalized_without_its_data_is_folded_in_at_startup(scene):
    a, b = scene.model("alpha"), scene.model("beta")
    ids = ids_of(scene, "gen-safety", 0, 4)
    scene.finalize(a, "gen-safety", [1.0, 0.0, 1.0, 1.0], ids=ids)
    bench = scene.ctx.loaded_benchmarks.pop("gen-safety")  # as if another version were loaded
    scene.finalize(b, "gen-safety", [1.0, 1.0, 1.0, 0.0], ids=ids)
    with scene.ctx.db.read() as session:
        assert len(session.scalars(select(LabelCachedTask)).all()) == 1
        got = answer(scene.ctx, session, parse_plan({}))
    assert [r.model_id for r in got.rows] == [a]
    assert run_backfill(scene) == 0  # not loaded here: left for a later startup
    scene.ctx.loaded_benchmarks["gen-safety"] = bench
    assert run_backfill(scene) == 1
    check(scene, parse_plan({}))
    check(scene, parse_plan({"labels": {"skill": ["value"]}}))


def test_a_server_restart_backfills_tasks_from_before_the_cache(scene, make_ctx, db_url, sums_spec):  # noqa: F811
    fill(scene)
    incremental = cache_rows(scene)
    forget(scene)
    again = make_ctx(db_url, benchmarks=[*BENCHES, sums_spec])  # startup: ensure_benchmarks
    scene.ctx = again
    assert cache_rows(scene) == incremental
    assert again.label_sets  # the hot path's ids, remembered
    check(scene, parse_plan({"labels": {"format": ["mcqa"]}}))


def test_concurrent_finalizations_lose_no_sample(scene):
    """Last votes of many models' tasks on shared label sets at once (threads; the
    row locks matter on PostgreSQL): every sample counts, nothing deadlocks."""
    models = [scene.model(f"m{i}") for i in range(6)]
    finals = []
    for i, model in enumerate(models):
        for bench, start in (("gen-reasoning", 0), ("gen-safety", 0)):
            samples = [1.0, 0.0, 1.0, float(i % 2), 1.0, 0.0]
            *first, last = scene.open_task(
                model,
                bench,
                samples,
                panel=bench == "gen-safety",
                ids=ids_of(scene, bench, start, 6),
            )
            for submit in first:
                submit()
            finals.append(last)
    barrier = threading.Barrier(len(finals))
    errors: list[BaseException] = []

    def run(submit) -> None:
        barrier.wait()
        try:
            assert submit().task_status == "DONE"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f,)) for f in finals]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    check(scene, parse_plan({}))
    check(scene, parse_plan({"labels": {"format": ["binary"]}}))
    with scene.ctx.db.read() as session:
        assert len(session.scalars(select(LabelCachedTask)).all()) == len(finals)
