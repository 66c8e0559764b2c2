"""The aggregate leaderboard kept in ``leaderboard_aggregates``, on SQLite and PostgreSQL.

Tasks finalize through ``submit_result`` (three identical votes on leases made for
them), so the aggregate rows are the ones the server writes. They are checked
against numbers computed here from the submitted samples, and against the reference:
the previous implementation, which aggregated every per-benchmark row in Python on
each read (``reference_rows`` below).

``db_url`` is parametrized over ``sqlite`` (a temporary file) and ``postgres`` (a
database of this module, see ``tests/integration/pg.py``, emptied before each test).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import threading
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from quorumbench.core.canonical import predictions_digest
from quorumbench.core.intervals import score_interval
from quorumbench.core.leaderboard import Interval, weighted_aggregate
from quorumbench.db.engine import connect
from quorumbench.db.migrate import downgrade, upgrade
from quorumbench.db.models import (
    Benchmark,
    Epoch,
    LeaderboardAggregate,
    LeaderboardEntry,
    Lease,
    Model,
    Runner,
    Task,
)
from quorumbench.queue.base import Claimant
from quorumbench.services.accounts import create_account
from quorumbench.services.benchmarks import ensure_benchmarks
from quorumbench.services.leaderboard import (
    AGGREGATE,
    Row,
    leaderboard,
    rebuild_aggregates,
    sync_aggregates,
)
from quorumbench.services.results import ResultPayload, submit_result

Z = 1.959963984540054
ONE_PILLAR: dict[str, Any] = {
    "pillars": {"sums": "math", "third": "math"},
    "pillar_weights": {"reasoning": 0, "coding": 0, "math": 1, "language": 0, "safety": 0},
}
"""Every benchmark here in the math pillar, the only one weighted: the aggregate is the
weighted mean of the benchmarks' (chance-corrected) scores, which for these generative
benchmarks, chance level 0, are their raw scores (five pillars: test_pillars.py)."""
SORTS = ("score", "ci_low", "n_samples", "updated_at", "model")


# --- backends ----------------------------------------------------------------------


# --- a server with models, voters and tasks ----------------------------------------


class Scene:
    """Models of one owner, three voting accounts, and tasks finalized by their votes."""

    def __init__(self, ctx, clock) -> None:
        self.ctx, self.clock = ctx, clock
        self.owner = create_account(ctx, "owner").id
        # two panels of three: tasks voted on by different panels share no runner rows
        self.panels = [[self._voter(f"voter{p}{i}") for i in range(3)] for p in range(2)]
        self.tasks_done: dict[tuple[int, int], int] = {}
        with ctx.db.write() as session:
            session.add_all(
                Epoch(
                    id=i,
                    starts_at=clock.now,
                    ends_at=clock.now,
                    seed=f"{i}",
                    seed_commitment=f"{i}",
                    scheduled_at=None,
                )
                for i in range(1, 9)
            )

    def _voter(self, name: str) -> Claimant:
        account = create_account(self.ctx, name)
        with self.ctx.db.write() as session:
            runner = Runner(account_id=account.id, name="box", created_at=self.clock.now)
            session.add(runner)
            session.flush()
            return Claimant(account.id, runner.id)

    def bench(self, name: str) -> int:
        with self.ctx.db.read() as session:
            return session.scalars(select(Benchmark.id).where(Benchmark.name == name)).one()

    def model(self, name: str) -> int:
        with self.ctx.db.write() as session:
            model = Model(
                ref=f"hf:org/{name}@{'0' * 40}",
                name=name,
                owner_id=self.owner,
                revision="0" * 40,
                details={},
                active=True,
                created_at=self.clock.now,
            )
            session.add(model)
            session.flush()
            return model.id

    def open_task(
        self,
        model_id: int,
        bench: str,
        samples: list[float],
        panel: int = 0,
        ids: list[str] | None = None,
    ) -> list[Any]:
        """A task of ``model_id`` on ``bench`` with a lease per voter: submit callables."""
        voters = self.panels[panel]
        bench_id = self.bench(bench)
        epoch = self.tasks_done.get((model_id, bench_id), 0) + 1
        self.tasks_done[(model_id, bench_id)] = epoch
        now = self.clock.now
        ids = ids or [f"s{i}" for i in range(len(samples))]
        with self.ctx.db.write() as session:
            task = Task(
                model_id=model_id,
                benchmark_id=bench_id,
                epoch_id=epoch,
                n_samples=len(samples),
                quorum=3,
                open_slots=0,
                sample_ids=ids,
                created_at=now,
            )
            session.add(task)
            session.flush()
            leases = [
                Lease(
                    task_id=task.id,
                    runner_id=v.runner_id,
                    account_id=v.account_id,
                    attempt=1,
                    round=1,
                    leased_at=now,
                    expires_at=now + timedelta(hours=1),
                )
                for v in voters
            ]
            session.add_all(leases)
            session.flush()
            pairs = [(v, lease.id) for v, lease in zip(voters, leases, strict=True)]
            task_id = task.id
        payload = ResultPayload(
            task_id=task_id,
            score=sum(samples) / len(samples),
            n=len(samples),
            sample_ids=ids,
            sample_scores=samples,
            sample_output_hashes=["0" * 64] * len(samples),
            outputs_sha256="ab" * 32,
            sample_predictions=[str(x) for x in samples],
            predictions_sha256=predictions_digest(str(x) for x in samples),
            runtime_s=1.0,
        )
        return [
            lambda v=v, lease_id=lease_id: submit_result(self.ctx, v, lease_id, 1, payload)
            for v, lease_id in pairs
        ]

    def finalize(
        self, model_id: int, bench: str, samples: list[float], ids: list[str] | None = None
    ) -> None:
        *first, last = self.open_task(model_id, bench, samples, ids=ids)
        for submit in first:
            assert submit().task_status == "PENDING"
        assert last().task_status == "DONE"
        self.clock.advance(60)

    def aggregates(self) -> dict[int, LeaderboardAggregate]:
        with self.ctx.db.read() as session:
            rows = session.scalars(select(LeaderboardAggregate)).all()
            return {r.model_id: r for r in rows}


@pytest.fixture
def scene(make_ctx, clock, db_url, sums_spec) -> Scene:
    return Scene(make_ctx(db_url, **ONE_PILLAR, benchmarks=["arith", sums_spec]), clock)


# --- the reference: the previous read-time computation -----------------------------


def reference_rows(ctx, benchmark: str | None = None) -> list[Row]:
    """Every ranked row, unordered, as the previous implementation computed them."""
    with ctx.db.read() as session:
        weights = {
            b.id: b.weight for b in session.scalars(select(Benchmark).where(Benchmark.active))
        }
        names = dict(session.execute(select(Model.id, Model.name)).all())
        entries = session.scalars(select(LeaderboardEntry)).all()
        if benchmark is not None:
            bench_id = next(
                b.id
                for b in session.scalars(select(Benchmark).where(Benchmark.active))
                if b.name == benchmark
            )
            return [
                Row(
                    0,
                    0,
                    0,
                    e.model_id,
                    names[e.model_id],
                    benchmark,
                    e.score,
                    e.stderr,
                    e.ci_low,
                    e.ci_high,
                    e.n_samples,
                    e.n_tasks,
                    e.updated_at,
                )
                for e in entries
                if e.benchmark_id == bench_id
            ]
    by_model: dict[int, list[LeaderboardEntry]] = {}
    for e in entries:
        if e.benchmark_id in weights:
            by_model.setdefault(e.model_id, []).append(e)
    rows = []
    for model_id, parts in by_model.items():
        if len(parts) < len(weights):
            continue
        agg = weighted_aggregate(
            [
                (weights[e.benchmark_id], Interval(e.score, e.stderr, e.ci_low, e.ci_high))
                for e in parts
            ]
        )
        rows.append(
            Row(
                0,
                0,
                0,
                model_id,
                names[model_id],
                AGGREGATE,
                agg.score,
                agg.stderr,
                agg.ci_low,
                agg.ci_high,
                sum(e.n_samples for e in parts),
                sum(e.n_tasks for e in parts),
                max(e.updated_at for e in parts),
            )
        )
    return rows


def board_ranks(rows) -> dict[int, tuple[int, int, int]]:
    """(rank, best, worst) per model id on the board ``rows``, pair by pair: 1 + the
    higher scores, 1 + the intervals wholly above, N − the intervals wholly below."""

    def key(value):
        return round(value, 9)

    return {
        r.model_id: (
            1 + sum(1 for o in rows if key(o.score) > key(r.score)),
            1 + sum(1 for o in rows if key(o.ci_low) > key(r.ci_high)),
            len(rows) - sum(1 for o in rows if key(o.ci_high) < key(r.ci_low)),
        )
        for r in rows
    }


def reference_page(rows, sort="score", descending=True, min_samples=0, q=None, limit=50, offset=0):
    ranks = board_ranks(rows)  # on the whole board, before any filter
    rows = [r for r in rows if r.n_samples >= min_samples and (not q or q in r.model)]
    rows.sort(key=lambda r: r.model_id)
    rows.sort(key=lambda r: getattr(r, "model" if sort == "model" else sort), reverse=descending)
    page = rows[offset : offset + limit]
    return [
        replace(
            r,
            rank=ranks[r.model_id][0],
            rank_best=ranks[r.model_id][1],
            rank_worst=ranks[r.model_id][2],
        )
        for r in page
    ], len(rows)


def page_of(ctx, **kwargs):
    """A page's rows without what pillars added (checked in test_pillars.py), as the
    reference has them; the chance correction of these generative benchmarks is none."""
    page = leaderboard(ctx, **kwargs)
    for row in page.rows:
        if row.benchmark == AGGREGATE:
            assert row.pillars is not None and set(row.pillars) <= {"math"}
            assert row.missing_pillars == ()
        else:
            assert row.chance == 0.0 and row.pillar == "math"
            assert row.normalised == Interval(row.score, row.stderr, row.ci_low, row.ci_high)
    plain = [replace(r, pillar=None, chance=None, normalised=None, pillars=None) for r in page.rows]
    return plain, page.total


# --- numbers computed here, from the samples ------------------------------------------


@dataclass(frozen=True)
class Expected:
    score: float
    stderr: float
    n_samples: int
    n_tasks: int
    ci: tuple[float, float]


def expected_entry(tasks: list[list[float]]) -> Expected:
    samples = [s for task in tasks for s in task]
    n = len(samples)
    mean = sum(sum(t) / len(t) * len(t) for t in tasks) / n  # sample-weighted task means
    stderr = statistics.stdev(samples) / math.sqrt(n) if n > 1 else 0.0
    return Expected(mean, stderr, n, len(tasks), score_interval(sum(samples), n))


def expected_aggregate(parts: list[tuple[float, Expected]]) -> Expected:
    """The weighted mean, and its interval by MOVER from the parts' (written out)."""
    total = sum(w for w, _ in parts)
    mean = sum(w * e.score for w, e in parts) / total
    below = math.sqrt(sum((w / total * (e.score - e.ci[0])) ** 2 for w, e in parts))
    above = math.sqrt(sum((w / total * (e.ci[1] - e.score)) ** 2 for w, e in parts))
    return Expected(
        mean,
        math.sqrt(sum((w * e.stderr) ** 2 for w, e in parts)) / total,
        sum(e.n_samples for _, e in parts),
        sum(e.n_tasks for _, e in parts),
        (mean - below, mean + above),
    )


def assert_row_is(row, expected: Expected) -> None:
    assert row.score == pytest.approx(expected.score, abs=1e-12)
    assert row.stderr == pytest.approx(expected.stderr, abs=1e-12)
    assert (row.ci_low, row.ci_high) == pytest.approx(expected.ci, abs=1e-12)
    assert row.ci_low < row.score < row.ci_high or row.ci_low < row.ci_high
    assert (row.n_samples, row.n_tasks) == (expected.n_samples, expected.n_tasks)


# --- tests -------------------------------------------------------------------------

A_ARITH = [[1, 0, 1, 1], [0, 0, 1, 0, 1, 1]]
A_SUMS = [[1, 1, 0]]
B_ARITH = [[0, 1, 0, 0]]
B_SUMS = [[1, 1, 1, 0], [0, 1, 1, 1]]


def test_aggregate_rows_follow_finalized_tasks_on_two_benchmarks(scene):
    a, b, c = scene.model("alpha"), scene.model("beta"), scene.model("gamma")
    for model, bench, tasks in [
        (a, "arith", A_ARITH),
        (b, "sums", B_SUMS),
        (a, "sums", A_SUMS),
        (c, "arith", [[1, 1, 1, 1]]),  # measured on one benchmark of two: not ranked
        (b, "arith", B_ARITH),
    ]:
        for samples in tasks:
            scene.finalize(model, bench, [float(s) for s in samples])

    rows, total = page_of(scene.ctx)
    assert total == 2 and len(rows) == 2
    by_id = {r.model_id: r for r in rows}
    assert set(by_id) == {a, b}
    assert_row_is(
        by_id[a],
        expected_aggregate([(1.0, expected_entry(A_ARITH)), (1.0, expected_entry(A_SUMS))]),
    )
    assert_row_is(
        by_id[b],
        expected_aggregate([(1.0, expected_entry(B_ARITH)), (1.0, expected_entry(B_SUMS))]),
    )
    assert [r.rank for r in rows] == [1, 2]
    assert rows[0].score >= rows[1].score
    assert {r.benchmark for r in rows} == {AGGREGATE}
    # exactly what the previous implementation computed from the same per-benchmark rows
    assert (rows, total) == reference_page(reference_rows(scene.ctx))
    # the last finalization of each model dates its aggregate
    assert by_id[b].updated_at == scene.clock.now - timedelta(seconds=60)

    stored = scene.aggregates()
    assert set(stored) == {a, b, c}
    assert stored[c].complete is False and stored[c].n_benchmarks == 1
    assert stored[a].complete and stored[a].n_benchmarks == 2

    arith, arith_total = page_of(scene.ctx, benchmark="arith")
    assert arith_total == 3
    assert {r.model_id for r in arith} == {a, b, c}
    assert_row_is(next(r for r in arith if r.model_id == a), expected_entry(A_ARITH))
    assert (arith, arith_total) == reference_page(reference_rows(scene.ctx, "arith"))


def test_paging_sorting_and_filters_match_the_reference(scene):
    ids = [scene.model(f"m{i:02d}") for i in range(9)]
    patterns = [[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0]]
    for i, model in enumerate(ids):
        # ties on purpose: models share scores, sample counts and update times
        scene.finalize(model, "arith", [float(s) for s in patterns[i % 4]])
        if i != 4:  # m04 is on one benchmark only
            scene.finalize(model, "sums", [float(s) for s in patterns[(i * 3) % 4]])
        if i % 3 == 0:
            scene.finalize(model, "sums", [1.0, 0.0])
    assert {r.model_id for r in reference_rows(scene.ctx)} == set(ids) - {ids[4]}

    for benchmark in (None, "arith", "sums"):
        rows = reference_rows(scene.ctx, benchmark)
        for sort, descending, min_samples, q, (limit, offset) in itertools.product(
            SORTS,
            (True, False),
            (0, 9),
            (None, "3", "m0"),
            ((50, 0), (3, 0), (3, 4), (4, 7), (5, 100)),
        ):
            kwargs = {
                "sort": sort,
                "descending": descending,
                "min_samples": min_samples,
                "model_query": q,
                "limit": limit,
                "offset": offset,
            }
            got = page_of(scene.ctx, benchmark=benchmark, **kwargs)
            assert got == reference_page(rows, sort, descending, min_samples, q, limit, offset), (
                benchmark,
                kwargs,
            )


def test_rebuild_when_the_active_benchmarks_or_weights_change(scene, make_ctx, db_url, sums_spec):
    a, b, c = scene.model("alpha"), scene.model("beta"), scene.model("gamma")
    for samples in A_ARITH:
        scene.finalize(a, "arith", [float(s) for s in samples])
    scene.finalize(a, "sums", [float(s) for s in A_SUMS[0]])
    scene.finalize(b, "arith", [float(s) for s in B_ARITH[0]])
    scene.finalize(b, "sums", [float(s) for s in B_SUMS[0]])
    scene.finalize(c, "arith", [1.0, 1.0, 0.0, 1.0])
    assert {r.model_id for r in page_of(scene.ctx)[0]} == {a, b}

    # a restart with arith only: every model measured on arith is ranked, on arith alone
    scene.ctx = make_ctx(db_url, **ONE_PILLAR, benchmarks=["arith"])
    rows, total = page_of(scene.ctx)
    assert total == 3
    assert (rows, total) == reference_page(reference_rows(scene.ctx))
    assert_row_is(next(r for r in rows if r.model_id == a), expected_entry(A_ARITH))

    # a task of the inactive benchmark that finalizes now leaves the aggregate alone
    before = page_of(scene.ctx)
    scene.finalize(c, "sums", [0.0, 1.0, 0.0, 0.0])
    assert page_of(scene.ctx) == before

    # both again: gamma is now measured on both
    scene.ctx = make_ctx(db_url, **ONE_PILLAR, benchmarks=["arith", sums_spec])
    rows, total = page_of(scene.ctx)
    assert {r.model_id for r in rows} == {a, b, c}
    assert (rows, total) == reference_page(reference_rows(scene.ctx))

    # a weight changed in the database: the next start recomputes with it
    with scene.ctx.db.write() as session:
        session.execute(update(Benchmark).where(Benchmark.name == "sums").values(weight=3.0))
    scene.ctx = make_ctx(db_url, **ONE_PILLAR, benchmarks=["arith", sums_spec])
    rows, total = page_of(scene.ctx)
    assert (rows, total) == reference_page(reference_rows(scene.ctx))
    assert_row_is(
        next(r for r in rows if r.model_id == a),
        expected_aggregate([(1.0, expected_entry(A_ARITH)), (3.0, expected_entry(A_SUMS))]),
    )

    # nothing changed: nothing to rebuild; rows gone missing: rebuilt
    with scene.ctx.db.write() as session:
        assert sync_aggregates(scene.ctx, session) is False
        session.execute(delete(LeaderboardAggregate).where(LeaderboardAggregate.model_id == b))
    with scene.ctx.db.write() as session:
        assert sync_aggregates(scene.ctx, session) is True
    assert (rows, total) == page_of(scene.ctx)

    # a third benchmark: nobody is measured on all three yet
    third = sums_spec.replace("sums.json", "third.json")
    with open(sums_spec, encoding="utf-8") as f:
        spec = json.load(f)
    spec["name"] = "third"
    with open(third, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    scene.ctx = make_ctx(db_url, **ONE_PILLAR, benchmarks=["arith", sums_spec, third])
    assert page_of(scene.ctx) == ([], 0)
    assert page_of(scene.ctx, benchmark="arith")[1] == 3


def test_concurrent_finalizations_of_one_model_on_two_benchmarks(scene):
    """The last votes of a model's two tasks arrive at once (threads; the locks matter
    on PostgreSQL): both tasks count in the aggregate, and nothing deadlocks.

    Each benchmark's tasks have their own panel of voters, so the two finalizations
    share no runner row, and only the aggregate row's lock orders them.
    """
    models = [scene.model(f"m{i}") for i in range(8)]
    for model in models:  # the aggregate row exists: only its row lock orders the two
        scene.finalize(model, "arith", [1.0, 1.0, 0.0, 0.0])
    finals = []
    for i, model in enumerate(models):
        for bench, samples in (("arith", [1.0, 0.0, 1.0, i % 2]), ("sums", [0.0, 1.0, 1.0])):
            *first, last = scene.open_task(model, bench, samples, panel=bench == "sums")
            for submit in first:
                submit()
            finals.append(last)
    barrier = threading.Barrier(len(finals))
    errors: list[BaseException] = []
    statuses: list[str] = []

    def run(submit) -> None:
        barrier.wait()
        try:
            statuses.append(submit().task_status)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f,)) for f in finals]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert statuses == ["DONE"] * len(finals)

    rows, total = page_of(scene.ctx)
    assert total == len(models)
    assert (rows, total) == reference_page(reference_rows(scene.ctx))
    for row in rows:
        assert (row.n_tasks, row.n_samples) == (3, 11)
    stored = scene.aggregates()
    assert all(stored[m].complete and stored[m].n_benchmarks == 2 for m in models)


def test_a_rebuild_while_tasks_finalize_loses_nothing(scene):
    """A weight changes and the aggregates are rebuilt while tasks finalize: finalizations
    wait for the rebuild, then recompute with the new weight (PostgreSQL: the table lock)."""
    models = [scene.model(f"m{i}") for i in range(8)]
    for model in models:
        scene.finalize(model, "arith", [1.0, 0.0, 0.0, 0.0])
    finals = []
    for i, model in enumerate(models):
        for bench, samples in (("arith", [1.0, 1.0, i % 2, 0.0]), ("sums", [1.0, 0.0, 1.0])):
            *first, last = scene.open_task(model, bench, samples, panel=bench == "sums")
            for submit in first:
                submit()
            finals.append(last)

    def reweigh_and_rebuild():
        with scene.ctx.db.write() as session:
            session.execute(update(Benchmark).where(Benchmark.name == "sums").values(weight=2.5))
            rebuild_aggregates(scene.ctx, session)

    barrier = threading.Barrier(len(finals) + 1)
    errors: list[BaseException] = []

    def run(work) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f,)) for f in [*finals, reweigh_and_rebuild]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    rows, total = page_of(scene.ctx)
    assert (rows, total) == reference_page(reference_rows(scene.ctx))
    assert total == len(models) and all(r.n_tasks == 3 for r in rows)
    with scene.ctx.db.write() as session:
        assert sync_aggregates(scene.ctx, session) is False  # every row has the new weight


def test_migration_backfills_an_existing_leaderboard(scene, make_ctx, db_url):
    a, b, c = scene.model("alpha"), scene.model("beta"), scene.model("gamma")
    scene.finalize(a, "arith", [1.0, 0.0, 1.0, 1.0])
    scene.finalize(a, "sums", [1.0, 1.0])
    scene.finalize(b, "arith", [0.0, 0.0, 1.0, 1.0])
    scene.finalize(b, "sums", [0.0, 1.0])
    scene.finalize(c, "sums", [1.0, 1.0, 1.0])
    expected = reference_page(reference_rows(scene.ctx))
    stored = scene.aggregates()

    db = connect(db_url)
    try:
        downgrade(db, "0001")  # a database from before the aggregate table
        upgrade(db)
    finally:
        db.dispose()
    assert scene.aggregates() == {}  # 0014 deleted them: the next start rebuilds them
    ensure_benchmarks(scene.ctx, scene.ctx.settings.benchmarks)
    assert scene.aggregates().keys() == stored.keys()
    for model_id, row in scene.aggregates().items():
        for column in (c.key for c in LeaderboardAggregate.__table__.columns):
            assert getattr(row, column) == getattr(stored[model_id], column), column
    assert page_of(scene.ctx) == expected
    with scene.ctx.db.write() as session:
        assert sync_aggregates(scene.ctx, session) is False  # the backfill is current


SINCE_0014 = {"chance_sum", "pillars", "missing_pillars"}
"""Columns migration 0014 added (absent from a database downgraded below it)."""


def stored(
    scene, before_0014: bool = False
) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[int, dict[str, Any]]]:
    def read(table) -> list[dict[str, Any]]:
        cols = [c for c in table.columns if not (before_0014 and c.key in SINCE_0014)]
        return [dict(r._mapping) for r in session.execute(select(*cols))]

    with scene.ctx.db.read() as session:
        entries = {(e["model_id"], e["benchmark_id"]): e for e in read(LeaderboardEntry.__table__)}
        aggregates = {a["model_id"]: a for a in read(LeaderboardAggregate.__table__)}
    return entries, aggregates


def test_migration_0011_recomputes_the_stored_intervals(scene, db_url):
    """Rows written with ``mean ± 1.96·se`` (0010) get the exact intervals the server
    writes now, from their sums; the downgrade puts the old ones back."""
    a, b, c = scene.model("alpha"), scene.model("beta"), scene.model("gamma")
    scene.finalize(a, "arith", [0.0] * 8)  # all wrong: shown as 0.000–0.000 before
    scene.finalize(a, "sums", [1.0, 1.0, 1.0])
    scene.finalize(b, "arith", [1.0, 0.0, 1.0, 1.0])
    scene.finalize(b, "arith", [0.0, 1.0])
    scene.finalize(b, "sums", [0.0, 1.0])
    scene.finalize(c, "sums", [1.0, 0.0, 0.0])  # on one benchmark: an incomplete aggregate
    entries, aggregates = stored(scene)
    expected = page_of(scene.ctx), page_of(scene.ctx, benchmark="arith")
    arith = scene.bench("arith")
    assert entries[(a, arith)]["ci_low"] == 0.0 and entries[(a, arith)]["ci_high"] > 0.3

    db = connect(db_url)
    try:
        downgrade(db, "0010")
        old_entries, old_aggregates = stored(scene, before_0014=True)
        assert (old_entries[(a, arith)]["ci_low"], old_entries[(a, arith)]["ci_high"]) == (0, 0)
        for key, row in old_entries.items():
            spread = Z * row["stderr"]
            assert row["ci_low"] == pytest.approx(max(0.0, row["score"] - spread), abs=1e-12)
            assert row["ci_high"] == pytest.approx(min(1.0, row["score"] + spread), abs=1e-12)
            unchanged = ("score", "stderr", "n_samples", "weighted_sum", "updated_at")
            assert {k: row[k] for k in unchanged} == {k: entries[key][k] for k in unchanged}
        old = old_aggregates[a]
        assert (old["ci_low"], old["ci_high"]) == pytest.approx(
            (max(0.0, old["score"] - Z * old["stderr"]), min(1.0, old["score"] + Z * old["stderr"]))
        )
        assert old_aggregates.keys() == aggregates.keys()
        upgrade(db)
    finally:
        db.dispose()
    ensure_benchmarks(scene.ctx, scene.ctx.settings.benchmarks)  # 0014 deleted them: rebuilt
    assert stored(scene) == (entries, aggregates)  # exactly what finalization wrote
    assert (page_of(scene.ctx), page_of(scene.ctx, benchmark="arith")) == expected
    with scene.ctx.db.write() as session:
        assert sync_aggregates(scene.ctx, session) is False
