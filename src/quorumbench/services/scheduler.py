"""Epochs and task creation.

Every epoch (``epoch_seconds``, default one hour, aligned to the Unix epoch) gets a
fresh random seed; its SHA-256 is the public commitment, and the seed itself is
revealed once the epoch has ended. Every ``tick`` makes sure the current epoch exists
and has a task for each active, unpaused model on each active benchmark, within the
epoch's budget: a model registered while its benchmarks were off, or a benchmark
added at a restart, gets its tasks on the next tick, not the next hour. ``tick`` is
safe to run from several replicas at once: the epoch row and each (model, benchmark,
epoch) task are protected by unique constraints, and an insert that loses the race
is ignored.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.leaderboard import overlapping
from quorumbench.core.pool_priority import PoolClaim, plan_with_pools
from quorumbench.core.sampling import sample_ids
from quorumbench.core.scheduling import (
    Budget,
    PairStats,
    Ranked,
    depth_tiers,
    task_depth,
    tier_at,
)
from quorumbench.db.models import TASK_EPOCH, Benchmark, Epoch, LeaderboardEntry, Model, Task
from quorumbench.db.pool_models import Pool, PoolEntry
from quorumbench.errors import QuorumError
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.benchmarks import loaded
from quorumbench.services.canaries import publish_overdue_canaries
from quorumbench.services.context import ServerContext
from quorumbench.services.edge_tasks import schedule_edge
from quorumbench.services.pool_ticks import pool_tick

log = logging.getLogger("quorumbench.scheduler")


def epoch_index(ctx: ServerContext, when: datetime) -> int:
    return int(when.timestamp()) // ctx.settings.epoch_seconds


def epoch_start(ctx: ServerContext, index: int) -> datetime:
    """When epoch ``index`` starts (epochs are ``epoch_seconds`` long from the Unix epoch)."""
    return datetime.fromtimestamp(index * ctx.settings.epoch_seconds, UTC)


def ensure_epoch(ctx: ServerContext, when: datetime) -> Epoch:
    """The epoch containing ``when``, created (with a new secret seed) if needed."""
    index = epoch_index(ctx, when)
    seconds = ctx.settings.epoch_seconds
    with ctx.db.write() as session:
        epoch = session.get(Epoch, index)
        if epoch is None:
            seed = secrets.token_hex(32)
            starts = epoch_start(ctx, index)
            statement = (
                ctx.db.insert(Epoch)
                .values(
                    id=index,
                    starts_at=starts,
                    ends_at=starts + timedelta(seconds=seconds),
                    seed=seed,
                    seed_commitment=sha256_hex(seed),
                    scheduled_at=None,
                )
                .on_conflict_do_nothing(index_elements=["id"])
            )
            session.execute(statement)
            epoch = session.get_one(Epoch, index)
        return epoch


def tiers_for(ctx: ServerContext, bench: Benchmark) -> tuple[int, ...]:
    """The depths a task of ``bench`` may have: its shallow ``samples_per_task``, then
    ``QB_DEPTH_TIERS``, none larger than the benchmark (a small custom spec)."""
    size = len(loaded(ctx, bench.name, bench.version).sample_ids())
    deeper = [min(d, size) for d in ctx.settings.depth_tiers if d > bench.samples_per_task]
    return tuple(dict.fromkeys([bench.samples_per_task, *deeper]))


@dataclass(frozen=True)
class Depth:
    """How deep a model's next task on one benchmark is, and why (the model page)."""

    tier: int
    samples: int
    """What its next task asks for."""
    tier_samples: int
    """What its tier asks for once its evidence reaches that many samples."""
    why: str


_ORDER = (LeaderboardEntry.score.desc(), LeaderboardEntry.model_id)


def _ranked(entry: LeaderboardEntry) -> Ranked:
    return Ranked(entry.model_id, entry.score, entry.ci_low, entry.ci_high)


def model_depths(ctx: ServerContext, model_id: int) -> dict[str, Depth]:
    """Per active benchmark, the tier and next task depth of ``model_id``: the same
    rule the scheduler applies (core.scheduling), from its rank, its rank neighbours
    and the top-k boundary, read through the board's score index."""
    settings = ctx.settings
    found: dict[str, Depth] = {}
    with ctx.db.read() as session:
        for bench in session.scalars(select(Benchmark).where(Benchmark.active)):
            try:
                tiers = tiers_for(ctx, bench)
            except QuorumError:  # its data is not here: the depths uncapped by its size
                tiers = (bench.samples_per_task, *settings.depth_tiers)
            entry = session.get(LeaderboardEntry, (model_id, bench.id))
            if entry is None:
                found[bench.name] = Depth(0, tiers[0], tiers[0], "not measured yet")
                continue
            board = select(LeaderboardEntry).where(LeaderboardEntry.benchmark_id == bench.id)
            before = or_(
                LeaderboardEntry.score > entry.score,
                and_(LeaderboardEntry.score == entry.score, LeaderboardEntry.model_id < model_id),
            )
            after = or_(
                LeaderboardEntry.score < entry.score,
                and_(LeaderboardEntry.score == entry.score, LeaderboardEntry.model_id > model_id),
            )
            position = session.scalar(
                select(func.count()).select_from(board.where(before).subquery())
            )
            above = session.scalars(
                board.where(before)
                .order_by(LeaderboardEntry.score, LeaderboardEntry.model_id.desc())
                .limit(1)
            ).first()
            below = session.scalars(board.where(after).order_by(*_ORDER).limit(1)).first()
            k = settings.depth_top_k
            edge = list(session.scalars(board.order_by(*_ORDER).offset(max(0, k - 1)).limit(2)))
            boundary = (_ranked(edge[0]), _ranked(edge[1])) if k > 0 and len(edge) == 2 else None
            neighbours = [_ranked(e) for e in (above, below) if e is not None]
            tier = tier_at(position or 0, _ranked(entry), neighbours, boundary, k, len(tiers))
            why = (
                "its interval overlaps no rank neighbour's, nor the top-k line: its place "
                "is settled",
                "its interval overlaps a rank neighbour's, or reaches across the line "
                f"under rank {k}",
                f"its interval overlaps a rank neighbour's within the top {k}",
            )[tier]
            found[bench.name] = Depth(
                tier,
                task_depth(tier, entry.n_samples, tiers),
                tiers[tier],
                why,
            )
    return found


def _pair_stats(
    session: Session, models: list[int], benchmarks: dict[int, tuple[int, ...]], top_k: int
) -> list[PairStats]:
    """Each (model, benchmark) pair's samples, interval, tier and next task's depth."""
    entries = {
        (e.model_id, e.benchmark_id): e
        for e in session.scalars(
            select(LeaderboardEntry).where(LeaderboardEntry.benchmark_id.in_(list(benchmarks)))
        )
    }
    overlap: dict[tuple[int, int], bool] = {}
    tier_of: dict[tuple[int, int], int] = {}
    for benchmark_id, tiers in benchmarks.items():
        rows = [e for (m, b), e in entries.items() if b == benchmark_id]
        flags = overlapping([(e.score, e.ci_low, e.ci_high) for e in rows])
        overlap.update({(e.model_id, benchmark_id): f for e, f in zip(rows, flags, strict=True)})
        ranked = [Ranked(e.model_id, e.score, e.ci_low, e.ci_high) for e in rows]
        for model_id, tier in depth_tiers(ranked, top_k, len(tiers)).items():
            tier_of[(model_id, benchmark_id)] = tier
    stats = []
    for model_id in models:
        for benchmark_id, tiers in benchmarks.items():
            entry = entries.get((model_id, benchmark_id))
            n = entry.n_samples if entry else 0
            tier = tier_of.get((model_id, benchmark_id), 0)
            stats.append(
                PairStats(
                    model_id,
                    benchmark_id,
                    n,
                    (entry.ci_high - entry.ci_low) if entry else 1.0,
                    overlap.get((model_id, benchmark_id), False),
                    depth=task_depth(tier, n, tiers),
                    tier=tier,
                    tier_depth=tiers[tier],
                )
            )
    return stats


@dataclass(frozen=True)
class TickReport:
    epoch: int
    created: int
    expired: int
    published: int = 0
    """Settled tasks published after their canary window passed."""
    pools: int = 0
    """Prize pool steps taken: snapshots stored, joins closed, pools ended and settled
    (``services/pool_ticks.py``)."""


SCHEDULED = (Model.active, Model.paused_at.is_(None), Model.retired_at.is_(None))
"""Models that get tasks: registered and active, not paused (their tasks kept failing),
not retired."""


def scheduled_in(epoch_id: int) -> tuple[ColumnElement[bool], ...]:
    """The benchmarks an epoch schedules: active ones, from their first epoch on (one
    created through the API starts with the epoch after its creation)."""
    return (
        Benchmark.active.is_(True),
        or_(Benchmark.first_epoch.is_(None), Benchmark.first_epoch <= epoch_id),
    )


def gaps(ctx: ServerContext, epoch_id: int) -> tuple[int, ...] | None:
    """What the epoch has, when it may still lack a (model, benchmark) task within its
    budgets (None when it cannot: every pair has its task, or a budget is spent).

    Four counts through indexes, cheap enough for every tick: the epoch's tasks and
    their samples (``ix_tasks_epoch_id``), those of scheduled models on active
    benchmarks, and the scheduled pairs there should be. The tick remembers the
    counts of a plan that added nothing, and plans again only when they change.
    """
    settings = ctx.settings
    with ctx.db.read() as session:
        have, samples = session.execute(
            select(func.count(), func.coalesce(func.sum(Task.n_samples), 0)).where(
                Task.epoch_id == epoch_id, Task.purpose == TASK_EPOCH
            )
        ).one()
        if have >= settings.epoch_task_budget or samples >= settings.epoch_sample_budget:
            return None
        models = session.scalar(select(func.count()).select_from(Model).where(*SCHEDULED))
        benchmarks = session.scalar(
            select(func.count()).select_from(Benchmark).where(*scheduled_in(epoch_id))
        )
        covered = session.scalar(
            select(func.count())
            .select_from(Task)
            .join(Model, Model.id == Task.model_id)
            .join(Benchmark, Benchmark.id == Task.benchmark_id)
            .where(
                Task.epoch_id == epoch_id,
                Task.purpose == TASK_EPOCH,
                *scheduled_in(epoch_id),
                *SCHEDULED,
            )
        )
    if (covered or 0) >= (models or 0) * (benchmarks or 0):
        return None
    return (epoch_id, int(have), int(samples), models or 0, benchmarks or 0, covered or 0)


def _loadable_tiers(
    ctx: ServerContext, benchmarks: dict[int, Benchmark]
) -> dict[int, tuple[int, ...]]:
    """Each benchmark's tiers; one whose data cannot be loaded now (a benchmark created
    through the API whose URL is down and whose cached copy is gone) is left out of
    this plan, logged, rather than stopping every other benchmark's tasks."""
    tiers: dict[int, tuple[int, ...]] = {}
    for bench in sorted(benchmarks.values(), key=lambda b: b.id):
        try:
            tiers[bench.id] = tiers_for(ctx, bench)
        except QuorumError as exc:
            event(
                log,
                "benchmark.unavailable",
                level=logging.WARNING,
                benchmark=bench.name,
                reason=str(exc)[:300],
            )
    return tiers


def pool_claims(
    session: Session, epoch: Epoch, benchmarks: dict[int, Benchmark]
) -> list[PoolClaim]:
    """The running pools whose board counts this epoch (active, and the epoch inside
    the pool's start and end), with the pairs of their entries that joined by the
    epoch's start (the board counts no earlier epoch of an entry) on this epoch's
    benchmarks (``core/pool_priority.py`` reserves budget for them)."""
    ids_of: dict[str, list[int]] = {}
    for bench in benchmarks.values():
        ids_of.setdefault(bench.name, []).append(bench.id)
    pools = session.execute(
        select(Pool.id, Pool.funds, Pool.benchmarks).where(
            Pool.status == "active",
            Pool.starts_at <= epoch.starts_at,
            Pool.ends_at >= epoch.ends_at,
        )
    ).all()
    claims = []
    for pool in pools:
        models = session.scalars(  # entries the board counts this epoch for
            select(PoolEntry.model_id).where(
                PoolEntry.pool_id == pool.id, PoolEntry.joined_at <= epoch.starts_at
            )
        )
        bench_ids = [i for name in pool.benchmarks for i in ids_of.get(name, [])]
        pairs = frozenset((m, b) for m in models for b in bench_ids)
        if pairs:
            claims.append(PoolClaim(pool.id, int(pool.funds), pairs))
    return claims


def schedule_epoch(ctx: ServerContext, epoch: Epoch) -> int:
    """Create this epoch's missing tasks within its budget (idempotent: several replicas
    may run it at once; a pair another one created first is skipped); how many this
    call created."""
    settings = ctx.settings
    quorum = settings.quorum
    created: list[int] = []
    with ctx.db.write() as session:
        models = list(session.scalars(select(Model.id).where(*SCHEDULED).order_by(Model.id)))
        benchmarks = {
            b.id: b for b in session.scalars(select(Benchmark).where(*scheduled_in(epoch.id)))
        }
        tiers = _loadable_tiers(ctx, benchmarks)
        benchmarks = {i: b for i, b in benchmarks.items() if i in tiers}
        have = {
            (row.model_id, row.benchmark_id): row.n_samples
            for row in session.execute(
                select(Task.model_id, Task.benchmark_id, Task.n_samples).where(
                    Task.epoch_id == epoch.id, Task.purpose == TASK_EPOCH
                )
            )
        }
        pairs = [
            p
            for p in _pair_stats(session, models, tiers, settings.depth_top_k)
            if (p.model_id, p.benchmark_id) not in have
        ]
        budget = Budget(
            max(0, settings.epoch_task_budget - len(have)),
            max(0, settings.epoch_sample_budget - sum(have.values())),
        )
        claims = pool_claims(session, epoch, benchmarks)
        plan = plan_with_pools(
            pairs, budget, settings.samples_per_task, claims, settings.pool_budget_share
        )
        ids_for: dict[tuple[int, int], list[str]] = {}
        for priority, pair in enumerate(plan, start=len(have)):
            bench = benchmarks[pair.benchmark_id]
            if (bench.id, pair.depth) not in ids_for:
                # one draw per benchmark and epoch: a deeper task's ids extend a
                # shallower one's (the same hash order, more of it)
                ids_for[(bench.id, pair.depth)] = sample_ids(
                    bench.dataset_sha256,
                    bench.version,
                    epoch.seed,
                    pair.depth,
                    loaded(ctx, bench.name, bench.version).sample_ids(),
                )
            new_id = session.execute(
                ctx.db.insert(Task)
                .values(
                    model_id=pair.model_id,
                    benchmark_id=bench.id,
                    epoch_id=epoch.id,
                    n_samples=pair.depth,
                    status=TaskStatus.PENDING,
                    round=1,
                    quorum=quorum,
                    open_slots=quorum,
                    attempts=0,
                    sample_ids=ids_for[(bench.id, pair.depth)],
                    priority=priority,
                    created_at=ctx.now(),
                )
                .on_conflict_do_nothing(
                    index_elements=["model_id", "benchmark_id", "epoch_id"],
                    # literal SQL: PostgreSQL matches a partial index by its predicate's
                    # text, and a bound parameter never matches it
                    index_where=text(f"purpose = '{TASK_EPOCH}'"),
                )
                .returning(Task.id)
            ).scalar()
            if new_id is not None:
                created.append(new_id)
        row = session.get_one(Epoch, epoch.id)
        if row.scheduled_at is None:
            row.scheduled_at = ctx.now()
    if created:
        ctx.queue.publish(created)
    return len(created)


def tick(ctx: ServerContext) -> TickReport:
    """One scheduler pass: the current epoch (or the one the context holds,
    ``ServerContext.scheduling_at``), its missing tasks and edge tasks
    (services/edge_tasks.py), expired leases, settled canaries nobody took, and the
    prize pools' lifecycle."""
    now = ctx.now()
    epoch = ensure_epoch(ctx, ctx.scheduling_time())
    created = 0
    found = gaps(ctx, epoch.id)
    if found is not None and found != ctx.fruitless_plan:
        created = schedule_epoch(ctx, epoch)
        ctx.fruitless_plan = None if created else found  # nothing fit: wait for a change
    created += schedule_edge(ctx, epoch)
    expired = ctx.queue.expire(now)
    published = publish_overdue_canaries(ctx, now)
    pools = pool_tick(ctx, epoch.id).changes
    return TickReport(epoch.id, created, expired, published, pools)


def revealed_seed(epoch: Epoch, now: datetime) -> str | None:
    """The seed once the epoch is over; before that only its commitment is public."""
    return epoch.seed if now >= epoch.ends_at else None
