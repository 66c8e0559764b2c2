"""Chance levels of the server's tasks and leaderboard rows (core/pillars.py).

A task's ``chance_sum`` is the sum of its samples' chance levels (``Sample.chance``),
set when the task is DONE: 0 for a generative benchmark (every item's level is 0),
else read from the benchmark object this process loaded at startup
(``services/benchmarks.loaded``); a leaderboard row accumulates its tasks' sums. When
the loaded benchmark is another version (or cannot be loaded here), a
multiple-choice task's sum is not known (None), and the row's becomes None until
:func:`fill_chance_sums`, run at every startup for the active benchmarks, fills it in
from the tasks' sample ids.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, select, update
from sqlalchemy.orm import Session

from quorumbench.db.engine import Executor
from quorumbench.db.models import TASK_EPOCH, LeaderboardEntry, Task
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.errors import QuorumError
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext

log = logging.getLogger("quorumbench.leaderboard")

_TASK_BENCHMARK = (
    select(
        Task.sample_ids,
        BenchmarkRow.name,
        BenchmarkRow.version,
        BenchmarkRow.dataset_sha256,
        BenchmarkRow.kind,
    )
    .join(BenchmarkRow, BenchmarkRow.id == Task.benchmark_id)
    .where(Task.id == bindparam("task_id_", type_=Integer))
)


def loaded_version(ctx: ServerContext, row: Any) -> Benchmark | None:
    """The benchmark object of the row's exact version, if this process has loaded it
    (every active one, at startup). Nothing is loaded here: this runs while a task is
    finalized, and a benchmark that is no longer active may not load at all."""
    bench = ctx.loaded_benchmarks.get(row.name)
    if bench is None or (bench.version, bench.dataset_sha256) != (
        row.version,
        row.dataset_sha256,
    ):
        return None
    return bench


def chance_sum(ctx: ServerContext, row: Any, sample_ids: Sequence[str]) -> float | None:
    """The sum of the chance levels of ``sample_ids`` of the benchmark ``row`` (name,
    version, dataset_sha256, kind): 0 for a generative benchmark, else from the loaded
    benchmark's samples; None when not known here."""
    if row.kind == "generate":
        return 0.0
    bench = loaded_version(ctx, row)
    if bench is None:
        return None
    try:
        return sum(s.chance for s in bench.samples(list(sample_ids)))
    except (KeyError, IndexError, ValueError, QuorumError):
        return None


def task_chance_sum(ctx: ServerContext, conn: Executor, task_id: int) -> float | None:
    """The chance sum of a task's samples (see :func:`chance_sum`)."""
    row = conn.execute(_TASK_BENCHMARK, {"task_id_": task_id}).one()
    return chance_sum(ctx, row, row.sample_ids)


def fill_chance_sums(ctx: ServerContext, session: Session) -> int:
    """Fill in the unknown chance sums of the active benchmarks' rows from their DONE
    tasks (and those tasks' own); how many rows it filled.

    A row stays unknown when a task's sum cannot be computed here, or when its DONE
    tasks do not add up to its samples (logged either way).
    """
    filled = 0
    benches = session.execute(
        select(
            BenchmarkRow.id,
            BenchmarkRow.name,
            BenchmarkRow.version,
            BenchmarkRow.dataset_sha256,
            BenchmarkRow.kind,
        ).where(BenchmarkRow.active)
    ).all()
    for bench in benches:
        entries = session.execute(
            select(LeaderboardEntry.model_id, LeaderboardEntry.n_samples).where(
                LeaderboardEntry.benchmark_id == bench.id, LeaderboardEntry.chance_sum.is_(None)
            )
        ).all()
        for entry in entries:
            tasks = session.execute(
                select(Task.id, Task.sample_ids, Task.n_samples, Task.chance_sum).where(
                    Task.model_id == entry.model_id,
                    Task.benchmark_id == bench.id,
                    Task.status == TaskStatus.DONE,
                    Task.purpose == TASK_EPOCH,
                )
            ).all()
            total: float | None = 0.0
            for task in tasks:
                found = task.chance_sum
                if found is None:
                    found = chance_sum(ctx, bench, task.sample_ids)
                    if found is not None:
                        session.execute(
                            update(Task).where(Task.id == task.id).values(chance_sum=found)
                        )
                total = None if found is None or total is None else total + found
            if total is None or sum(t.n_samples for t in tasks) != entry.n_samples:
                event(
                    log,
                    "leaderboard.chance_unknown",
                    level=logging.WARNING,
                    model=entry.model_id,
                    benchmark=bench.name,
                )
                continue
            session.execute(
                update(LeaderboardEntry)
                .where(
                    LeaderboardEntry.model_id == entry.model_id,
                    LeaderboardEntry.benchmark_id == bench.id,
                )
                .values(chance_sum=total)
            )
            filled += 1
    return filled
