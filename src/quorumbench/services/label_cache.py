"""The ask cache's tables, kept current: per (label set, model) sums of verified samples.

A *label set* is one (benchmark version, label combination): the five taxonomy-v1
labels (``core/taxonomy.py``) its samples share. ``label_aggregates`` holds, per label
set and model, the number of samples, the sum of their consensus scores
(``ConsensusOutcome.sample_consensus``, aligned with ``Task.sample_ids``), the sum of
their chance levels and when the newest of its tasks was finalized. Each benchmark
also has a *total* set (every label :data:`TOTAL`) holding the sums over all its
samples, so a plan that keeps every set of a benchmark reads one row per model there.
``services/ask_cache.py`` answers plans from these rows.

What is counted is what the leaderboard counts, sample by sample: every task that
reaches DONE through ``services/finalize.py`` (scheduled, canary or deepening work)
adds its samples in the transaction that finalizes it (:func:`fold_task`), with the
same per-sample values (the task's score for each sample when its verdict has no
per-sample consensus). The labels and chance levels come from the benchmark object
this process loaded (``ctx.loaded_benchmarks``), as ``services/chance.py`` reads
them: when it is another version or not loaded, the task is left out until
:func:`backfill`, run at every startup for the active benchmarks, folds it in.
``label_cached_tasks`` records each task folded in (with the samples it added: 0
when its sample ids and per-sample scores do not line up, which nothing can label);
claiming that row first makes every task count once, whoever folds it (the
finalizing transaction, or the backfill of another replica starting meanwhile).

Concurrency on PostgreSQL: the rows are added to by ``INSERT … ON CONFLICT DO
UPDATE SET n = n + excluded.n``, in label set id order, so concurrent finalizations
lose no increment and take the row locks in one order. The sets of a loaded
benchmark that exist at startup are remembered then (:func:`backfill`), so the hot
path only looks their ids up in memory; a set first seen after startup is inserted
(a no-op when another transaction made it) and read back by each finalization until
the next startup.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Integer, and_, bindparam, case, exists, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from quorumbench.core.consensus import Verdict
from quorumbench.core.taxonomy import LABEL_KEYS
from quorumbench.db.engine import Executor
from quorumbench.db.label_models import LabelAggregate, LabelCachedTask, LabelSet
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.db.models import ConsensusOutcome, Task
from quorumbench.errors import QuorumError
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.chance import loaded_version
from quorumbench.services.context import ServerContext

log = logging.getLogger("quorumbench.leaderboard")

TOTAL = "*"
"""Every label of a benchmark's total set."""
TOTAL_LABELS = (TOTAL,) * len(LABEL_KEYS)
BACKFILL_CHUNK = 500
"""Tasks read and folded per round of the startup backfill."""

Labels = tuple[str, ...]
"""A label set's labels in :data:`~quorumbench.core.taxonomy.LABEL_KEYS` order."""


@dataclass
class Cell:
    """Sums of one label set's samples for one model."""

    n_samples: int = 0
    sample_sum: float = 0.0
    chance_sum: float = 0.0
    updated_at: datetime | None = None

    def add(self, n: int, total: float, chance: float, when: datetime) -> None:
        self.n_samples += n
        self.sample_sum += total
        self.chance_sum += chance
        if self.updated_at is None or when > self.updated_at:
            self.updated_at = when


def sample_cells(
    bench: Benchmark, sample_ids: Sequence[str], scores: Sequence[float]
) -> dict[Labels, tuple[int, float, float]] | None:
    """Per label set (its total included), (samples, score sum, chance sum) of one
    task's samples; None when its ids and scores do not line up or its data lacks one."""
    if not scores or len(sample_ids) != len(scores):
        return None
    try:
        samples = bench.samples(list(sample_ids))
    except (KeyError, IndexError, ValueError, QuorumError):
        return None
    cells: dict[Labels, tuple[int, float, float]] = {}
    for sample, score in zip(samples, scores, strict=True):
        labels = sample.labels.as_dict()
        key = tuple(labels[k] for k in LABEL_KEYS)
        n, total, chance = cells.get(key, (0, 0.0, 0.0))
        cells[key] = (n + 1, total + float(score), chance + sample.chance)
    cells[TOTAL_LABELS] = (
        len(samples),
        sum(float(s) for s in scores),
        sum(s.chance for s in samples),
    )
    return cells


@functools.cache
def _statements(dialect: str) -> tuple[Any, Any, Any]:
    """The upsert that adds to ``label_aggregates``, the claim of a task and the
    insert of new label sets, for one dialect (built once)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    agg = insert(LabelAggregate)
    new = agg.excluded
    add = agg.on_conflict_do_update(
        index_elements=["label_set_id", "model_id"],
        set_={
            "n_samples": LabelAggregate.n_samples + new.n_samples,
            "sample_sum": LabelAggregate.sample_sum + new.sample_sum,
            "chance_sum": LabelAggregate.chance_sum + new.chance_sum,
            "updated_at": case(
                (new.updated_at > LabelAggregate.updated_at, new.updated_at),
                else_=LabelAggregate.updated_at,
            ),
        },
    )
    claim = insert(LabelCachedTask).on_conflict_do_nothing()
    sets = insert(LabelSet).on_conflict_do_nothing()
    return add, claim, sets


_SETS_OF = select(
    LabelSet.id, LabelSet.skill, LabelSet.subject, LabelSet.target, LabelSet.format,
    LabelSet.language,
).where(LabelSet.benchmark_id == bindparam("benchmark_id", type_=Integer))  # fmt: skip

_TASK = (
    select(
        Task.sample_ids,
        BenchmarkRow.name,
        BenchmarkRow.version,
        BenchmarkRow.dataset_sha256,
    )
    .join(BenchmarkRow, BenchmarkRow.id == Task.benchmark_id)
    .where(Task.id == bindparam("task_id_", type_=Integer))
)


def set_ids(
    ctx: ServerContext,
    conn: Executor,
    benchmark_id: int,
    wanted: Iterable[Labels],
    *,
    remember: bool = False,
) -> dict[Labels, int]:
    """The ids of ``benchmark_id``'s label sets ``wanted``, made when missing.

    Ids are read from ``ctx.label_sets`` when there; else the sets are inserted (a
    no-op for those that exist) and read back. Only ``remember`` (the startup
    backfill, whose transaction must commit before the server serves) stores them in
    ``ctx.label_sets``: an id made by a transaction that then rolls back is never
    remembered.
    """
    wanted = sorted(set(wanted))
    known = {k: ctx.label_sets.get((benchmark_id, k)) for k in wanted}
    missing = [k for k, v in known.items() if v is None]
    if not missing:
        return {k: v for k, v in known.items() if v is not None}
    _, _, new_sets = _statements(ctx.db.dialect)
    conn.execute(
        new_sets,
        [{"benchmark_id": benchmark_id, **dict(zip(LABEL_KEYS, k, strict=True))} for k in missing],
    )
    found = {
        tuple(row[1:]): row[0] for row in conn.execute(_SETS_OF, {"benchmark_id": benchmark_id})
    }
    if remember:
        for labels, set_id in found.items():
            ctx.label_sets[(benchmark_id, labels)] = set_id
    return {k: found[k] for k in wanted}


def add_cells(
    ctx: ServerContext,
    conn: Executor,
    benchmark_id: int,
    cells: dict[tuple[Labels, int], Cell],
    *,
    remember: bool = False,
) -> None:
    """Add per (labels, model) sums of one benchmark to ``label_aggregates``, in
    (label set id, model id) order."""
    if not cells:
        return
    ids = set_ids(ctx, conn, benchmark_id, {k for k, _ in cells}, remember=remember)
    rows = sorted(
        (
            {
                "label_set_id": ids[labels],
                "model_id": model_id,
                "benchmark_id": benchmark_id,
                "n_samples": cell.n_samples,
                "sample_sum": cell.sample_sum,
                "chance_sum": cell.chance_sum,
                "updated_at": cell.updated_at,
            }
            for (labels, model_id), cell in cells.items()
        ),
        key=lambda r: (r["label_set_id"], r["model_id"]),
    )
    add, _, _ = _statements(ctx.db.dialect)
    conn.execute(add, rows)


def _claim(ctx: ServerContext, conn: Executor, task_id: int, n: int, now: datetime) -> bool:
    """Record the task as folded in; False when it already was (then add nothing)."""
    _, claim, _ = _statements(ctx.db.dialect)
    done = conn.execute(claim, {"task_id": task_id, "n_samples": n, "cached_at": now})
    return bool(cast("CursorResult[Any]", done).rowcount)


def fold_task(
    ctx: ServerContext,
    conn: Executor,
    task_id: int,
    task: Any,
    verdict: Verdict,
    now: datetime,
) -> bool:
    """Add a task just finalized DONE (``task``: its model_id, benchmark_id and
    n_samples) to the cache, in the finalizing transaction; False when its
    benchmark's data is not loaded here at that version (the next startup's
    :func:`backfill` folds it in)."""
    row = conn.execute(_TASK, {"task_id_": task_id}).one()
    bench = loaded_version(ctx, row)
    if bench is None:
        return False
    assert verdict.score is not None
    scores = list(verdict.sample_consensus) or [verdict.score] * task.n_samples
    found = sample_cells(bench, row.sample_ids, scores)
    if not _claim(ctx, conn, task_id, 0 if found is None else found[TOTAL_LABELS][0], now):
        return True
    if found is None:
        event(log, "ask_cache.unlabelled", level=logging.WARNING, task=task_id)
        return True
    cells = {
        (labels, task.model_id): Cell(n, total, chance, now)
        for labels, (n, total, chance) in found.items()
    }
    add_cells(ctx, conn, task.benchmark_id, cells)
    return True


def backfill(ctx: ServerContext, session: Session) -> int:
    """Fold in every DONE task of an active benchmark loaded here that is not in the
    cache yet (finalized before migration 0016, or while its data was not loaded);
    how many tasks it folded. Idempotent: a task is claimed once.

    Remembers the label set ids of each such benchmark for the hot path (those that
    exist, and those the backfill makes)."""
    conn = session.connection()
    folded = 0
    benches = conn.execute(
        select(
            BenchmarkRow.id, BenchmarkRow.name, BenchmarkRow.version, BenchmarkRow.dataset_sha256
        )
        .where(BenchmarkRow.active)
        .order_by(BenchmarkRow.id)
    ).all()
    for row in benches:
        bench = loaded_version(ctx, row)
        if bench is None:
            continue
        for set_id, *labels in conn.execute(_SETS_OF, {"benchmark_id": row.id}):
            ctx.label_sets[(row.id, tuple(labels))] = set_id
        folded += _backfill_benchmark(ctx, conn, row.id, bench)
    if folded:
        event(log, "ask_cache.backfilled", tasks=folded)
    return folded


def _backfill_benchmark(
    ctx: ServerContext, conn: Executor, benchmark_id: int, bench: Benchmark
) -> int:
    pending = (
        select(
            Task.id,
            Task.model_id,
            Task.n_samples,
            Task.sample_ids,
            Task.score,
            Task.finalized_at,
            ConsensusOutcome.sample_consensus,
        )
        .join(
            ConsensusOutcome,
            and_(ConsensusOutcome.task_id == Task.id, ConsensusOutcome.round == Task.round),
        )
        .where(
            Task.benchmark_id == benchmark_id,
            Task.status == TaskStatus.DONE,
            ConsensusOutcome.status == TaskStatus.DONE,
            ~exists().where(LabelCachedTask.task_id == Task.id),
            Task.id > bindparam("after", type_=Integer),
        )
        .order_by(Task.id)
        .limit(BACKFILL_CHUNK)
    )
    folded, after = 0, 0
    while True:
        tasks = conn.execute(pending, {"after": after}).all()
        if not tasks:
            return folded
        after = tasks[-1].id
        cells: dict[tuple[Labels, int], Cell] = {}
        for task in tasks:
            scores = list(task.sample_consensus) or [task.score] * task.n_samples
            found = sample_cells(bench, task.sample_ids, scores)
            when = task.finalized_at or ctx.now()
            n = 0 if found is None else found[TOTAL_LABELS][0]
            if not _claim(ctx, conn, task.id, n, ctx.now()):
                continue
            folded += 1
            if found is None:
                event(log, "ask_cache.unlabelled", level=logging.WARNING, task=task.id)
                continue
            for labels, (k, total, chance) in found.items():
                cells.setdefault((labels, task.model_id), Cell()).add(k, total, chance, when)
        add_cells(ctx, conn, benchmark_id, cells, remember=True)
