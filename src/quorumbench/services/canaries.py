"""Canaries: settled tasks handed to one more runner as spot checks.

See the comment below for the rule; ``services/results.py`` decides when a task
settles and calls in here, ``services/scheduler.py``'s tick publishes the canaries
nobody took (:func:`publish_overdue_canaries`).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, exists, select

from quorumbench.core.consensus import Verdict, canary_passes, verdict_from_dict
from quorumbench.db.models import Lease, LeaseState, Model, Runner, Task
from quorumbench.protocol import ResultPayload, TaskStatus
from quorumbench.services.context import ServerContext
from quorumbench.services.finalize import (
    _COUNTED,
    _OUTLIERS,
    _TASK,
    _publish_done,
    _tally,
    _TaskState,
)

# A canary is a spot check: a task that has just reached consensus is, now and then,
# kept open for one more runner instead of being published. To that runner it is an
# ordinary open task of the current epoch (same payload, same public view: open
# tasks show no results and no result count); its result is compared with the
# settled answer, and a wrong one costs reputation. Then the task is published with
# the consensus it had reached (the canary result is stored and logged, never voted).
# A settled task that no runner takes within ``canary_window_s`` is published anyway.

_OTHER_RUNNER = (
    select(Runner.id)
    .where(
        Runner.suspended.is_(False),
        Runner.last_seen_at >= bindparam("since"),
        Runner.account_id != bindparam("owner_id", type_=Integer),
        ~exists().where(
            Lease.task_id == bindparam("task_id", type_=Integer),
            Lease.account_id == Runner.account_id,
        ),
    )
    .limit(1)
)
"""A runner seen lately that could take the canary slot (not the owner's, no lease on it)."""


_CHANCE = random.SystemRandom()
"""Which settled tasks become canaries must not be predictable from outside."""


def _canary_wanted(ctx: ServerContext, conn: Connection, task_row: Any, now: datetime) -> bool:
    rate = ctx.settings.canary_rate
    if rate <= 0 or _CHANCE.random() >= rate:
        return False
    owner = conn.execute(select(Model.owner_id).where(Model.id == task_row.model_id)).scalar()
    since = now - timedelta(seconds=ctx.settings.canary_window_s)
    params = {"since": since, "owner_id": owner, "task_id": task_row.task_id}
    return conn.execute(_OTHER_RUNNER, params).first() is not None


def _settle_as_canary(
    ctx: ServerContext, conn: Connection, task: _TaskState, verdict: Verdict, now: datetime
) -> None:
    deadline = now + timedelta(seconds=ctx.settings.canary_window_s)
    canary = {
        "verdict": verdict.as_dict(),
        "settled_at": now.isoformat(),
        "deadline": deadline.isoformat(),
        "threshold": ctx.settings.agreement_threshold,
        "checks": [],
    }
    conn.execute(_TASK, {"task_id_": task.id, "canary": canary, "open_slots": 1})


def _finish_canary(
    ctx: ServerContext,
    conn: Connection,
    lease: Any,
    task: _TaskState,
    result_id: int,
    payload: ResultPayload,
) -> TaskStatus:
    """Check a canary result against the settled verdict, then publish the task.

    The rule is the one the verdict was reached with (its ``tolerance`` and
    ``epsilon``; a canary settled before the per-sample rule is checked on scores)."""
    canary = dict(lease.canary)
    verdict = verdict_from_dict(canary["verdict"])
    counted = conn.execute(_COUNTED, {"task_id": task.id}).all()
    inside = set(verdict.agreeing)
    agreeing = [r.score for r in counted if r.id in inside]
    passed = canary_passes(
        agreeing,
        payload.score,
        canary["threshold"],
        sample_scores=payload.sample_scores,
        sample_consensus=verdict.sample_consensus,
        tolerance=verdict.tolerance,
        epsilon=verdict.epsilon,
    )
    if not passed:
        conn.execute(_OUTLIERS, {"ids": [result_id]})
    _tally(ctx, conn, {lease.runner_id: (1, 0) if passed else (0, 1)})
    task.note("canary.checked", result=result_id, passed=passed)
    checks = [*canary["checks"], {"result_id": result_id, "passed": passed}]
    conn.execute(_TASK, {"task_id_": task.id, "canary": {**canary, "checks": checks}})
    _publish_done(ctx, conn, lease, task, counted, verdict, ctx.now())
    return task.status


def publish_overdue_canaries(ctx: ServerContext, now: datetime) -> int:
    """Publish settled tasks whose canary window is over and that nobody is running."""
    with ctx.db.read() as session:
        waiting = session.execute(
            # An open task is PENDING or DISPUTED (ix_tasks_status_id): this runs every
            # tick, so it reads the open tasks, never the finished history.
            select(Task.id, Task.canary).where(
                Task.status.in_((TaskStatus.PENDING, TaskStatus.DISPUTED)),
                Task.finalized_at.is_(None),
                Task.canary.is_not(None),
            )
        ).all()
    due = [t.id for t in waiting if datetime.fromisoformat(t.canary["deadline"]) <= now]
    published = 0
    for task_id in due:
        state = None
        with ctx.db.write_connection() as conn:
            query = _LEASE_TASK
            if ctx.db.dialect != "sqlite":
                query = query.with_for_update()
            row = conn.execute(query, {"task_id": task_id}).first()
            if row is None or row.finalized_at is not None:
                continue
            busy = conn.execute(
                select(Lease.id)
                .where(Lease.task_id == task_id, Lease.state == LeaseState.ACTIVE)
                .limit(1)
            ).first()
            if busy is not None:
                continue  # its submission (or its expiry, next time) settles it
            conn.execute(_TASK, {"task_id_": task_id, "open_slots": 0})
            state = _TaskState(task_id, row.status, row.round, row.quorum)
            counted = conn.execute(_COUNTED, {"task_id": task_id}).all()
            verdict = verdict_from_dict(row.canary["verdict"])
            _publish_done(ctx, conn, row, state, counted, verdict, now)
            state.note("canary.unclaimed")
            published += 1
        if state is not None:
            state.log()
    return published


_LEASE_TASK = select(
    Task.id.label("task_id"),
    Task.status,
    Task.round,
    Task.quorum,
    Task.model_id,
    Task.benchmark_id,
    Task.n_samples,
    Task.finalized_at,
    Task.canary,
    Task.purpose,
).where(Task.id == bindparam("task_id", type_=Integer))
"""A task with the columns ``_publish_done`` reads (shaped like a ``_LEASE`` row)."""
