"""A pool's held-out final split: committed at creation, revealed at the end, evaluated
by the runners, and the final standing computed on it.

At creation a funder may publish only the SHA-256 of a private final dataset
(``Pool.final_sha256``). Nobody can train on data nobody has seen, and the hash pins
the bytes. Then:

1. **Reveal** (:func:`reveal`, the funder, between the pool's end and the end +
   ``QB_POOL_REVEAL_WINDOW_S``): a benchmark spec (``evaluation/spec.py``, the format
   of ``POST /v0/benchmarks``) whose ``data.url`` holds the data and whose
   ``data.sha256`` is the commitment. The server fetches the data (SSRF guard, size
   limit), checks the hash and every row, and stores the spec as a *hidden* benchmark
   named ``pool-<id>-final`` (``active`` false: never scheduled by epochs, never on
   the board, the cache or an aggregate). Its name is reserved: no one creates it
   through the API.
2. **Tasks** (:func:`schedule_final`, the scheduler's tick, once): the held-out items
   in the seeded hash order of ``core/sampling.sample_ids`` with the commitment as the
   seed (so the funder cannot pick which items after seeing the entries), at most
   ``QB_POOL_FINAL_MAX_SAMPLES``, cut into parts of ``QB_POOL_FINAL_TASK_SAMPLES``;
   every entry gets a task per part on exactly the same items (``Task.purpose =
   'pool_final'``, ``Task.pool_id``, ``Task.part``). They go through the normal queue
   and consensus, leased before every epoch task (priority -1): three runners must
   agree, a dispute re-queues. The final standing waits for them until
   ``final_deadline`` (the scheduling + ``QB_POOL_FINAL_EVAL_S``).
3. **Freeze** (:func:`freeze_held_out`): once every held-out task is final, or at the
   deadline, on the tasks final by then (the cut-off, ``standing_at``: the last task's
   finalization, or the deadline; the same standing whichever tick freezes it). An
   entry's score is the mean of its per-sample consensus scores over its DONE
   held-out tasks, with ``core/intervals.score_interval``; an entry with none is not
   in the standing (and is paid nothing).

A pool whose funder does not reveal by the reveal deadline ends on its pool board as
of the end + the finalize grace, as a pool without a held-out split does, and its
payout record says the split was not used and why. The payout record of a pool that
used it names the benchmark, the spec's hash, the items, and the tasks counted, so
``quorumbench verify`` recomputes the standing from the logged tasks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError

from quorumbench.benchmarks.custom import CustomBenchmark
from quorumbench.core.allocation import Standing
from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.intervals import score_interval
from quorumbench.core.sampling import sample_ids
from quorumbench.db.engine import Executor
from quorumbench.db.models import TASK_POOL_FINAL, Benchmark, Task
from quorumbench.db.pool_models import Pool, PoolEntry
from quorumbench.errors import (
    ConflictError,
    InvalidSpecError,
    NotFoundError,
    PermissionDeniedError,
)
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.remote_data import fetch_verified, keep_in_cache
from quorumbench.evaluation.spec import parse_spec
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.benchmarks import data_cache_dir, fetch_policy, loaded
from quorumbench.services.context import ServerContext
from quorumbench.services.pool_board import PoolEntryView, pool_chance_sum, scored_tasks

log = logging.getLogger("quorumbench.pools")

RESERVED_NAME = re.compile(r"^pool-[0-9]+-final$")
"""Names of held-out benchmarks: no one creates one through the API."""
FINAL_PRIORITY = -1
"""Held-out tasks are leased before every epoch task (``Task.priority``; lower first)."""
STATES = ("none", "awaiting_reveal", "evaluating", "frozen", "not_revealed", "cancelled")
"""Where a pool's held-out split stands (:func:`final_state`)."""


def final_benchmark_name(pool_id: int) -> str:
    return f"pool-{pool_id}-final"


def reveal_deadline(ctx: ServerContext, pool: Pool) -> datetime:
    return pool.ends_at + timedelta(seconds=ctx.settings.pool_reveal_window_s)


def final_state(ctx: ServerContext, pool: Pool, now: datetime) -> str:
    """``none`` (no split), ``awaiting_reveal`` (until the reveal deadline),
    ``evaluating`` (revealed, standing not frozen), ``frozen`` (the standing is the
    held-out one), ``not_revealed`` (the deadline passed: the board decides) or
    ``cancelled`` (the pool was, and pays nothing)."""
    if pool.final_sha256 is None:
        return "none"
    if pool.status == "cancelled":
        return "cancelled"
    if pool.final_benchmark_id is not None:
        return "frozen" if pool.ended_at is not None else "evaluating"
    if pool.ended_at is not None or now >= reveal_deadline(ctx, pool):
        return "not_revealed"
    return "awaiting_reveal"


# --- revealing --------------------------------------------------------------------


def _check_reveal(
    ctx: ServerContext, pool_id: int, pool: Pool | None, account_id: int, now: datetime
) -> Pool:
    if pool is None:
        raise NotFoundError(f"no pool {pool_id}")
    if pool.funder_id != account_id:
        raise PermissionDeniedError("only the pool's funder reveals its held-out data")
    if pool.final_sha256 is None:
        raise ConflictError(f"pool {pool.id} committed to no held-out final split")
    if pool.status != "active":
        raise ConflictError(f"pool {pool.id} is {pool.status}")
    if pool.final_benchmark_id is not None:
        raise ConflictError(f"pool {pool.id}'s held-out data was revealed already")
    if now < pool.ends_at:
        raise ConflictError(
            f"the held-out data is revealed at the end ({pool.ends_at.isoformat()}), "
            "not before: nobody may train on it"
        )
    deadline = reveal_deadline(ctx, pool)
    if pool.ended_at is not None or now >= deadline:
        raise ConflictError(
            f"the held-out data had to be revealed by {deadline.isoformat()}: pool "
            f"{pool.id} ends on its pool board"
        )
    return pool


def reveal(ctx: ServerContext, account_id: int, pool_id: int, raw_spec: object) -> None:
    """The funder reveals the held-out data as a benchmark spec (module docstring).
    Every refusal happens before anything is written."""
    now = ctx.now()
    with ctx.db.read() as session:
        pool = _check_reveal(ctx, pool_id, session.get(Pool, pool_id), account_id, now)
        commitment = pool.final_sha256
    if isinstance(raw_spec, dict):  # its name and version are the server's
        raw_spec = {**raw_spec, "name": final_benchmark_name(pool_id), "version": 1}
    spec = parse_spec(raw_spec, "spec")
    if spec.data.url is None:
        raise InvalidSpecError(
            "spec: data.url: the held-out data is revealed at a URL the server and the "
            "runners can fetch (https://, or hf://datasets/<repo>@<commit>/<path>)"
        )
    if spec.data.sha256 != commitment:
        raise InvalidSpecError(
            f"spec: data.sha256 {spec.data.sha256} is not the SHA-256 pool {pool_id} "
            f"committed to ({commitment})"
        )
    url = spec.data.url
    data = fetch_verified(url, spec.data.sha256, fetch_policy(ctx.settings))
    bench = CustomBenchmark(spec, data, url, BenchmarkContext(ctx.datasets_dir))
    keep_in_cache(data_cache_dir(ctx.settings), spec.data.sha256, data)
    stored = spec.model_dump(mode="json")
    with ctx.db.write() as session:
        pg = ctx.db.dialect == "postgresql"
        pool = _check_reveal(
            ctx, pool_id, session.get(Pool, pool_id, with_for_update=pg), account_id, ctx.now()
        )
        row = Benchmark(
            name=spec.name,
            version=spec.version,
            prompt_version=bench.prompt_version,
            kind=bench.kind,
            dataset_sha256=spec.data.sha256,
            config=dict(bench.config),
            samples_per_task=min(ctx.settings.pool_final_task_samples, len(bench.sample_ids())),
            weight=0.0,
            active=False,  # hidden: never scheduled by epochs, never on the board
            created_at=now,
            spec=stored,
            source_url=url,
            owner_id=pool.funder_id,
            first_epoch=None,
            retired_at=None,
            pillar=spec.pillar,
        )
        session.add(row)
        try:
            session.flush()
        except IntegrityError as exc:  # a benchmark of that name from before it was reserved
            raise ConflictError(
                f"a benchmark named {spec.name} exists already on this server; an operator "
                "must rename it before this pool's held-out data can be revealed"
            ) from exc
        pool.final_url = url
        pool.final_spec = stored
        pool.final_benchmark_id = row.id
        pool.final_revealed_at = now
        session.flush()
    ctx.loaded_benchmarks[spec.name] = bench
    event(log, "pool.revealed", pool=pool_id, items=len(bench.sample_ids()))


# --- tasks ------------------------------------------------------------------------


def final_items(ctx: ServerContext, pool: Pool, row: Benchmark) -> list[str]:
    """The held-out items every entry is evaluated on (module docstring)."""
    every = loaded(ctx, row.name, row.version).sample_ids()
    n = min(ctx.settings.pool_final_max_samples, len(every))
    return sample_ids(row.dataset_sha256, row.version, pool.final_sha256 or "", n, every)


def parts(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def schedule_final(ctx: ServerContext, pool: Pool, epoch_id: int) -> int:
    """Make the held-out tasks of a revealed pool, once (a conditional update lets one
    replica do it); how many this call made."""
    if pool.final_benchmark_id is None or pool.final_scheduled_at is not None:
        return 0
    with ctx.db.read() as session:
        row = session.get_one(Benchmark, pool.final_benchmark_id)
        models = list(
            session.scalars(
                select(PoolEntry.model_id)
                .where(PoolEntry.pool_id == pool.id)
                .order_by(PoolEntry.id)
            )
        )
    chunks = parts(final_items(ctx, pool, row), ctx.settings.pool_final_task_samples)
    now = ctx.now()
    created: list[int] = []
    with ctx.db.write_connection() as conn:
        claimed = conn.execute(
            update(Pool)
            .where(Pool.id == pool.id, Pool.final_scheduled_at.is_(None))
            .values(
                final_scheduled_at=now,
                final_deadline=now + timedelta(seconds=ctx.settings.pool_final_eval_s),
            )
        )
        if not claimed.rowcount:
            return 0
        quorum = ctx.settings.quorum
        for model_id in models:
            for part, ids in enumerate(chunks):
                new_id = conn.execute(
                    ctx.db.insert(Task)
                    .values(
                        model_id=model_id,
                        benchmark_id=row.id,
                        epoch_id=epoch_id,
                        n_samples=len(ids),
                        status=TaskStatus.PENDING,
                        round=1,
                        quorum=quorum,
                        open_slots=quorum,
                        attempts=0,
                        sample_ids=ids,
                        priority=FINAL_PRIORITY,
                        created_at=now,
                        purpose=TASK_POOL_FINAL,
                        pool_id=pool.id,
                        part=part,
                    )
                    .on_conflict_do_nothing(
                        index_elements=["pool_id", "model_id", "part"],
                        index_where=text(f"purpose = '{TASK_POOL_FINAL}'"),
                    )
                    .returning(Task.id)
                ).scalar()
                if new_id is not None:
                    created.append(new_id)
    if created:
        ctx.queue.publish(created)
    event(log, "pool.final_scheduled", pool=pool.id, tasks=len(created))
    return len(created)


# --- the held-out standing --------------------------------------------------------


@dataclass(frozen=True)
class FinalProgress:
    """How far the held-out evaluation is (for the pool's page and API)."""

    state: str
    reveal_by: datetime | None
    benchmark: str | None
    tasks: int
    final: int
    done: int
    deadline: datetime | None


def progress(ctx: ServerContext, session: Executor, pool: Pool, now: datetime) -> FinalProgress:
    counts = (0, 0, 0)
    if pool.final_scheduled_at is not None:
        total, final, done = session.execute(
            select(
                func.count(),
                func.count(Task.finalized_at),
                func.count().filter(Task.status == TaskStatus.DONE),
            ).where(Task.pool_id == pool.id, Task.purpose == TASK_POOL_FINAL)
        ).one()
        counts = (int(total), int(final), int(done))
    return FinalProgress(
        state=final_state(ctx, pool, now),
        reveal_by=None if pool.final_sha256 is None else reveal_deadline(ctx, pool),
        benchmark=None if pool.final_benchmark_id is None else final_benchmark_name(pool.id),
        tasks=counts[0],
        final=counts[1],
        done=counts[2],
        deadline=pool.final_deadline,
    )


def held_out_cutoff(conn: Executor, pool: Pool, now: datetime) -> datetime | None:
    """When the held-out standing is taken (module docstring); None: not yet."""
    if pool.final_scheduled_at is None or pool.final_deadline is None:
        return None
    total, open_, last = conn.execute(
        select(
            func.count(),
            func.count().filter(Task.finalized_at.is_(None)),
            func.max(Task.finalized_at),
        ).where(Task.pool_id == pool.id, Task.purpose == TASK_POOL_FINAL)
    ).one()
    if not total:  # no entries: nothing to wait for
        return pool.final_scheduled_at
    if not open_ and last is not None and last <= pool.final_deadline:
        return last
    if now >= pool.final_deadline:
        return pool.final_deadline
    return None


def _final_tasks(conn: Executor, pool: Pool, as_of: datetime) -> Sequence[Any]:
    return scored_tasks(
        conn,
        Task.pool_id == pool.id,
        Task.purpose == TASK_POOL_FINAL,
        Task.finalized_at <= as_of,
    )


def held_out_standings(
    ctx: ServerContext,
    conn: Executor,
    pool: Pool,
    entries: Sequence[PoolEntryView],
    as_of: datetime,
) -> tuple[list[Standing], list[int]]:
    """Each entry's held-out :class:`Standing` (entry order) and the task ids counted."""
    by_model = {e.model_id: e for e in entries}
    sums: dict[int, list[float]] = {}
    chance: dict[int, float | None] = {}
    counted: list[int] = []
    for task in _final_tasks(conn, pool, as_of):
        entry = by_model.get(task.model_id)
        ids = list(task.sample_ids)
        scores = list(task.sample_consensus) or (
            [] if task.score is None else [task.score] * task.n_samples
        )
        if entry is None or not ids or len(ids) != len(scores):
            continue
        counted.append(task.id)
        sums.setdefault(entry.id, []).extend(float(s) for s in scores)
        level = pool_chance_sum(ctx, task, ids)
        before = chance.get(entry.id, 0.0)
        chance[entry.id] = None if before is None or level is None else before + level
    out = []
    for entry in entries:
        got = sums.get(entry.id)
        if not got:
            continue
        n, total = len(got), sum(got)
        low, high = score_interval(total, n)
        level = chance.get(entry.id)
        mean_chance = 0.0 if level is None else min(max(level / n, 0.0), 1.0)
        out.append(Standing(entry.id, total / n, low, high, n, mean_chance))
    return out, counted


def split_record(pool: Pool, counted: Sequence[int] | None, why: str | None) -> dict[str, Any]:
    """The payout record's ``final_split``: what was committed and revealed, and whether
    (and how) the standing used it."""
    out: dict[str, Any] = {"sha256": pool.final_sha256, "url": pool.final_url}
    if counted is None:
        return {**out, "used": False, "why": why or "not revealed"}
    spec = pool.final_spec or {}
    return {
        **out,
        "used": True,
        "benchmark": {
            "name": final_benchmark_name(pool.id),
            "version": spec.get("version", 1),
            "dataset_sha256": pool.final_sha256,
        },
        "spec_sha256": sha256_hex(canonical_json(spec)),
        "tasks": sorted(counted),
    }
