"""Making a decided task public: its outcome, the runners' reputation, its
leaderboard row and the model's aggregate, the ask cache's per-label sums
(``services/label_cache.py``), the cross-check of the agreeing results' measurements
(``services/measurement_check.py``: hardware data, read by none of the others), and
its entry in the public log.

All of it runs in the transaction that decided the task (``services/results.py``
for a submission that completes a quorum, ``services/canaries.py`` for a spot check
that ends), as Core statements built once: this is a hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, insert, select, update

from quorumbench.core.consensus import Verdict
from quorumbench.core.leaderboard import Accumulator
from quorumbench.db.models import (
    TASK_EPOCH,
    TASK_POOL_FINAL,
    ConsensusOutcome,
    LeaderboardEntry,
    Result,
    Runner,
    Task,
)
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services import publiclog
from quorumbench.services.chance import task_chance_sum
from quorumbench.services.context import ServerContext, forget_identities
from quorumbench.services.label_cache import fold_task
from quorumbench.services.leaderboard import entry_values, refresh_aggregate
from quorumbench.services.measurement_check import check_measurements

log = logging.getLogger("quorumbench.results")


_COUNTED = (
    select(Result.id, Result.runner_id, Result.score, Result.sample_scores)
    .where(Result.task_id == bindparam("task_id", type_=Integer), Result.counted)
    .order_by(Result.id)
)


@dataclass
class _TaskState:
    """The task's status and round as the submission leaves them."""

    id: int
    status: TaskStatus
    round: int
    quorum: int
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """What the decision did, logged once its transaction has committed."""

    def note(self, name: str, **fields: Any) -> None:
        self.events.append((name, {"task": self.id, **fields}))

    def log(self) -> None:
        for name, fields in self.events:
            event(log, name, **fields)


_TASK = update(Task).where(Task.id == bindparam("task_id_", type_=Integer))
"""Set the task's columns named in the parameters (``task_id_`` picks the task)."""


_ENTRY = update(LeaderboardEntry).where(
    LeaderboardEntry.model_id == bindparam("model_id_", type_=Integer),
    LeaderboardEntry.benchmark_id == bindparam("benchmark_id_", type_=Integer),
)
_RECORD = insert(ConsensusOutcome)
_OUTLIERS = (
    update(Result).where(Result.id.in_(bindparam("ids", expanding=True))).values(outlier=True)
)
_TALLY = (
    update(Runner)
    .where(Runner.id == bindparam("runner_id_", type_=Integer))
    .values(
        agreements=Runner.agreements + bindparam("agree", type_=Integer),
        outliers=Runner.outliers + bindparam("out", type_=Integer),
    )
)
_SUSPEND = (
    update(Runner)
    .where(
        Runner.id == bindparam("runner_id_", type_=Integer),
        Runner.outliers >= bindparam("limit", type_=Integer),
        Runner.outliers > Runner.agreements,
        Runner.suspended.is_(False),
    )
    .values(suspended=True)
)


def _log_final(
    ctx: ServerContext, conn: Connection, task: _TaskState, verdict: Verdict, now: datetime
) -> None:
    """Append a task that reached its final status to the public log."""
    entry = publiclog.log_entry(conn, task.id, task.round, verdict, now)
    publiclog.append(ctx, conn, task.id, entry, now)


def _publish_done(
    ctx: ServerContext,
    conn: Connection,
    task_row: Any,
    task: _TaskState,
    counted: Sequence[Any],
    verdict: Verdict,
    now: datetime,
) -> None:
    """Make a DONE verdict public: outcome, reputation, leaderboard and log."""
    _record_outcome(conn, task, verdict, now)
    task.status = TaskStatus.DONE
    chance = task_chance_sum(ctx, conn, task.id)
    conn.execute(
        _TASK,
        {
            "task_id_": task.id,
            "status": TaskStatus.DONE,
            "score": verdict.score,
            "finalized_at": now,
            "chance_sum": chance,
        },
    )
    _update_reputation(ctx, conn, counted, verdict)
    _update_leaderboard(ctx, conn, task_row, verdict, chance, now)
    if task_row.purpose != TASK_POOL_FINAL:  # a pool's held-out data answers no plan
        fold_task(ctx, conn, task.id, task_row, verdict, now)  # the ask cache (label sets)
    # Hardware data beside the verdict: per-class statistics and energy flags, which
    # change no score, consensus or reputation (services/measurement_check.py).
    checked = check_measurements(ctx, conn, task.id, verdict.agreeing, now)
    _log_final(ctx, conn, task, verdict, now)
    task.note("task.finalized", status=TaskStatus.DONE, round=task.round, score=verdict.score)
    if flagged := sorted(i for check in checked for i in check.flagged):
        task.note("task.measurement_outliers", results=flagged)


_RULE_FIELDS = ("tolerance", "epsilon")
"""Verdict fields the public log carries but ``consensus_outcomes`` does not store."""


def _record_outcome(conn: Connection, task: _TaskState, verdict: Verdict, now: datetime) -> None:
    fields = {k: v for k, v in verdict.as_dict().items() if k not in _RULE_FIELDS}
    conn.execute(_RECORD, {"task_id": task.id, "round": task.round, **fields, "decided_at": now})


def _update_reputation(
    ctx: ServerContext, conn: Connection, counted: Sequence[Any], verdict: Verdict
) -> None:
    """Count agreements and outliers per runner with atomic increments.

    Runners are updated in id order, so two tasks finalizing at once on PostgreSQL
    take the row locks in the same order and cannot deadlock, and ``x = x + 1`` in
    SQL never loses a concurrent increment.
    """
    outliers = set(verdict.outliers)
    if outliers:
        conn.execute(_OUTLIERS, {"ids": sorted(outliers)})
    deltas: dict[int, tuple[int, int]] = {}
    for result in counted:
        agree, out = deltas.get(result.runner_id, (0, 0))
        if result.id in outliers:
            out += 1
        else:
            agree += 1
        deltas[result.runner_id] = (agree, out)
    _tally(ctx, conn, deltas)


def _tally(ctx: ServerContext, conn: Connection, deltas: dict[int, tuple[int, int]]) -> None:
    """Add (agreements, outliers) per runner id; suspend runners over the limit."""
    tallies = [
        {"runner_id_": runner_id, "agree": agree, "out": out}
        for runner_id, (agree, out) in sorted(deltas.items())
    ]
    conn.execute(_TALLY, tallies)
    limit = ctx.settings.outlier_limit
    for tally in tallies:
        if tally["out"]:
            suspended = conn.execute(_SUSPEND, {"runner_id_": tally["runner_id_"], "limit": limit})
            if suspended.rowcount:
                forget_identities(ctx)  # it may no longer pull: forget its cached id


def _update_leaderboard(
    ctx: ServerContext,
    conn: Connection,
    task: Any,
    verdict: Verdict,
    chance: float | None,
    now: datetime,
) -> None:
    """Add a DONE task (and its samples' chance sum, None: not known) to its (model,
    benchmark) row, then the model's aggregate.

    Not a deepen task (``services/deepen.py``): its samples were chosen by label, not
    drawn by the epoch's seed, and would tilt the board toward what was asked."""
    if task.purpose != TASK_EPOCH:
        return
    assert verdict.score is not None
    samples = list(verdict.sample_consensus) or [verdict.score] * task.n_samples
    key = {"model_id": task.model_id, "benchmark_id": task.benchmark_id}
    # Two tasks of one (model, benchmark) finalizing at once serialize on this row.
    empty = {
        "n_tasks": 0,
        "n_samples": 0,
        "weighted_sum": 0.0,
        "sample_sum": 0.0,
        "sample_sumsq": 0.0,
        "score": 0.0,
        "stderr": 0.0,
        "ci_low": 0.0,
        "ci_high": 0.0,
        "updated_at": now,
        "chance_sum": 0.0,
    }
    entry = ctx.db.locked_row(conn, LeaderboardEntry, key, empty)
    before = Accumulator(
        entry.n_tasks, entry.n_samples, entry.weighted_sum, entry.sample_sum, entry.sample_sumsq
    )
    values = entry_values(before.add_task(verdict.score, samples), now)
    known = entry.chance_sum is not None and chance is not None
    values["chance_sum"] = entry.chance_sum + chance if known else None
    conn.execute(_ENTRY, {"model_id_": task.model_id, "benchmark_id_": task.benchmark_id, **values})
    # Then the model's aggregate over benchmarks, in this transaction: it locks the
    # aggregate row after the per-benchmark row above (the one lock order everywhere).
    refresh_aggregate(ctx, conn, task.model_id)
