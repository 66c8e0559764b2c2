"""A pool's board: each entry's pool score over the pool's epochs, on shared items.

An entry's pool score is the mean of its finalized per-sample consensus scores
(``ConsensusOutcome.sample_consensus`` of the task's last round, aligned with
``Task.sample_ids``; a verdict without per-sample values counts its task score for
each sample, as the leaderboard does) on the pool's benchmarks, over the epoch tasks
(``purpose = 'epoch'``, never deepen tasks) of epochs that start at or after both the
pool's start and the entry's join and end by the pool's end.

Per task only the epoch's *base draw* counts: the first ``samples_per_task`` ids of
the task. Every epoch task of a benchmark in one epoch draws its ids from the same
seeded hash order, a deeper task taking more of it (``services/scheduler.py``), so
the base draw is the set every model of that epoch got: every entry is scored on the
same items per epoch, and an entry that joined later has fewer epochs, not a handicap
per item (the seed's ``score × progress`` penalised late joiners).

The interval is ``core/intervals.score_interval`` of the sum and the count; ranks come
from ``core/ranking.ranks``; the chance level is the mean of the counted samples'
chance levels (``services/chance.py``; a benchmark this process has not loaded, or
holds at another version, is loaded for it: :func:`pool_chance_sum`), counted as 0
only when its data cannot be loaded at all (logged). An entry without any counted
sample is not on the board (and is paid nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select

from quorumbench.core.allocation import Standing
from quorumbench.core.intervals import score_interval
from quorumbench.core.ranking import ranks
from quorumbench.db.engine import Executor
from quorumbench.db.models import (
    TASK_EPOCH,
    Account,
    Benchmark,
    ConsensusOutcome,
    Epoch,
    Model,
    Task,
)
from quorumbench.db.pool_models import Pool, PoolEntry
from quorumbench.errors import DataError, QuorumError
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.benchmarks import loaded
from quorumbench.services.chance import chance_sum
from quorumbench.services.context import ServerContext

log = logging.getLogger("quorumbench.pools")


@dataclass(frozen=True)
class PoolEntryView:
    id: int
    model_id: int
    model_name: str
    model_ref: str
    account_name: str
    joined_at: datetime


@dataclass(frozen=True)
class StandingRow:
    """One entry on the pool board, best first."""

    entry: PoolEntryView
    standing: Standing
    rank: int
    best: int
    worst: int


def entry_views(session: Executor, pool_id: int) -> list[PoolEntryView]:
    """The pool's entries, in the order they joined."""
    rows = session.execute(
        select(
            PoolEntry.id,
            PoolEntry.model_id,
            Model.name,
            Model.ref,
            Account.name.label("account"),
            PoolEntry.joined_at,
        )
        .join(Model, Model.id == PoolEntry.model_id)
        .join(Account, Account.id == PoolEntry.account_id)
        .where(PoolEntry.pool_id == pool_id)
        .order_by(PoolEntry.id)
    ).all()
    return [PoolEntryView(r.id, r.model_id, r.name, r.ref, r.account, r.joined_at) for r in rows]


@dataclass
class _Sums:
    n: int = 0
    total: float = 0.0
    chance: float | None = 0.0


def scored_tasks(session: Executor, *where: Any, extra: Sequence[Any] = ()) -> Sequence[Any]:
    """DONE tasks matching ``where`` with their last round's DONE consensus and their
    benchmark (what a pool standing sums), in id order; ``extra`` columns too."""
    return session.execute(
        select(
            Task.id,
            Task.model_id,
            Task.sample_ids,
            Task.n_samples,
            Task.score,
            ConsensusOutcome.sample_consensus,
            Benchmark.name,
            Benchmark.version,
            Benchmark.dataset_sha256,
            Benchmark.kind,
            *extra,
        )
        .join(
            ConsensusOutcome,
            and_(ConsensusOutcome.task_id == Task.id, ConsensusOutcome.round == Task.round),
        )
        .join(Benchmark, Benchmark.id == Task.benchmark_id)
        .where(Task.status == TaskStatus.DONE, ConsensusOutcome.status == TaskStatus.DONE, *where)
        .order_by(Task.id)
    ).all()


def _tasks(session: Executor, pool: Pool, models: list[int], as_of: datetime) -> Sequence[Any]:
    """The DONE epoch tasks of ``models`` on the pool's benchmarks, in the pool's epochs,
    finalized by ``as_of``, with their last round's consensus and their epoch's start."""
    return scored_tasks(
        session,
        Task.model_id.in_(models),
        Task.purpose == TASK_EPOCH,
        Benchmark.name.in_(list(pool.benchmarks)),
        Epoch.id == Task.epoch_id,
        Epoch.starts_at >= pool.starts_at,
        Epoch.ends_at <= pool.ends_at,
        Task.finalized_at <= as_of,
        extra=(Epoch.starts_at.label("epoch_starts_at"), Benchmark.samples_per_task),
    )


def _base_draw(task: Any) -> tuple[list[str], list[float]] | None:
    """The task's base-draw ids and their consensus scores (None: they do not line up)."""
    ids = list(task.sample_ids)
    scores = list(task.sample_consensus) or (
        [] if task.score is None else [task.score] * task.n_samples
    )
    if not ids or len(ids) != len(scores):
        return None
    k = min(task.samples_per_task, len(ids))
    return ids[:k], [float(s) for s in scores[:k]]


def pool_chance_sum(ctx: ServerContext, task: Any, ids: Sequence[str]) -> float | None:
    """The chance sum of ``ids`` of the task's benchmark (``services/chance.chance_sum``),
    loading that benchmark version when this process holds none (a pool's tick, not a
    finalization, so loading is fine here); None when its data cannot be loaded."""
    level = chance_sum(ctx, task, ids)
    if level is not None:
        return level
    try:
        bench = loaded(ctx, task.name, task.version)
        if (bench.version, bench.dataset_sha256) != (task.version, task.dataset_sha256):
            raise DataError(f"{task.name} v{task.version} is not the version this server has")
        return sum(s.chance for s in bench.samples(list(ids)))
    except (KeyError, IndexError, ValueError, QuorumError) as exc:
        event(
            log,
            "pool.chance_unknown",
            level=logging.WARNING,
            benchmark=task.name,
            version=task.version,
            reason=str(exc)[:300],
        )
        return None


def pool_standings(
    ctx: ServerContext,
    session: Executor,
    pool: Pool,
    entries: Sequence[PoolEntryView],
    as_of: datetime,
) -> list[Standing]:
    """Each scored entry's :class:`Standing` (module docstring), in entry order."""
    by_model = {e.model_id: e for e in entries}
    sums: dict[int, _Sums] = {}
    if not by_model:
        return []
    for task in _tasks(session, pool, list(by_model), as_of):
        entry = by_model[task.model_id]
        if task.epoch_starts_at < entry.joined_at:
            continue  # an epoch that began before it joined
        drawn = _base_draw(task)
        if drawn is None:
            continue
        ids, scores = drawn
        acc = sums.setdefault(entry.id, _Sums())
        acc.n += len(ids)
        acc.total += sum(scores)
        level = pool_chance_sum(ctx, task, ids)
        acc.chance = None if acc.chance is None or level is None else acc.chance + level
    out = []
    for entry in entries:
        got = sums.get(entry.id)
        if got is None or got.n == 0:
            continue
        low, high = score_interval(got.total, got.n)
        chance = 0.0 if got.chance is None else min(max(got.chance / got.n, 0.0), 1.0)
        out.append(Standing(entry.id, got.total / got.n, low, high, got.n, chance))
    return out


def board(
    ctx: ServerContext,
    session: Executor,
    pool: Pool,
    entries: Sequence[PoolEntryView],
    as_of: datetime,
) -> list[StandingRow]:
    """The pool board at ``as_of``: scored entries best first, with ranks and their
    ranges (equal scores keep entry order here only for display: the allocation
    shares ties, it never favours the earlier entry)."""
    standings = pool_standings(ctx, session, pool, entries, as_of)
    return rows_of(standings, entries)


def rows_of(standings: Sequence[Standing], entries: Sequence[PoolEntryView]) -> list[StandingRow]:
    """Standing rows best first (score, then entry id), ranked among themselves."""
    view = {e.id: e for e in entries}
    ordered = sorted(standings, key=lambda s: (-s.score, s.entry_id))
    places = ranks([(s.score, s.ci_low, s.ci_high) for s in ordered])
    return [
        StandingRow(view[s.entry_id], s, p.rank, p.best, p.worst)
        for s, p in zip(ordered, places, strict=True)
    ]


def standing_json(rows: Sequence[StandingRow]) -> list[dict[str, Any]]:
    """A board as stored (snapshots, the final standing) and served: the allocation's
    fields (``entry``, ``score``, ``ci_low``, ``ci_high``, ``n_samples``, ``chance``),
    then the rank and who it is."""
    return [
        {
            "entry": r.entry.id,
            "score": r.standing.score,
            "ci_low": r.standing.ci_low,
            "ci_high": r.standing.ci_high,
            "n_samples": r.standing.n_samples,
            "chance": r.standing.chance,
            "rank": r.rank,
            "best": r.best,
            "worst": r.worst,
            "model_id": r.entry.model_id,
            "model_ref": r.entry.model_ref,
            "account": r.entry.account_name,
        }
        for r in rows
    ]


def rows_from_json(
    stored: Sequence[dict[str, Any]], entries: Sequence[PoolEntryView]
) -> list[StandingRow]:
    """A stored standing (:func:`standing_json`) as rows again."""
    standings = [
        Standing(
            int(r["entry"]),
            float(r["score"]),
            float(r["ci_low"]),
            float(r["ci_high"]),
            int(r["n_samples"]),
            float(r["chance"]),
        )
        for r in stored
    ]
    return rows_of(standings, entries)
