"""Failed tasks: the reasons runners report, and pausing a model whose tasks keep failing.

A runner that cannot evaluate a task reports why (``POST /v0/leases/{id}/failure``):
its lease ends FAILED with the reason (``leases.failure``), the slot reopens for
another account, and this account is not offered the task again (queue/sql.py).

**A failed task** is one on which at least ``min(2, quorum)`` distinct accounts
reported a failure (since the model was last resumed) and no result was stored: one
flaky runner, or one account's runners, never make a task failed.

**Consecutive**: the model's most recent ``pause_after_failed_tasks`` tasks (by id)
that have an outcome are all failed. A task has an outcome when it failed or has at
least one result (counted or not); tasks without one yet are skipped. Only the
model's :data:`SCAN_TASKS` newest tasks are looked at.

Then the model is paused (``models.paused_at``, ``paused_reason`` says why): the
scheduler gives it no new tasks, its open tasks are no longer claimable
(``queue/sql.py: eligible``), and the Redis queue drops their entries when it meets
them. Its owner (or an admin) resumes it (:func:`resume_model`), which republishes its
open tasks; failures reported before the resume no longer count.

The check runs right after each failure report, in a write transaction of its own
that first locks the model's row (``FOR NO KEY UPDATE`` on PostgreSQL; SQLite's write
transaction holds the whole database): two reports at once are checked one after the
other, and the second sees the first's failure, so a streak is neither missed nor
paused twice. A server that stops between the report and the check leaves the streak
to the next report.

What the pages show of failures is public: the reason (shortened) and when, with the
task, never which runner or account reported it. The owner's API
(:func:`model_failures`) gives the whole reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, distinct, func, select, update
from sqlalchemy.orm import Session

from quorumbench.db.models import TASK_EDGE, Benchmark, Lease, LeaseState, Model, Result, Task
from quorumbench.errors import NotFoundError, PermissionDeniedError
from quorumbench.logs import event
from quorumbench.queue.base import Claimant
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext

log = logging.getLogger("quorumbench.models")

SCAN_TASKS = 200
"""How far back (in the model's tasks) a streak of failed tasks is looked for."""
SHOWN_REASON_CHARS = 300
"""Pages show at most this much of a reason (runners write it; the API has it all)."""
RESUMED_AT = "resumed_at"
"""``models.details`` key: when the owner last resumed the model (ISO 8601)."""


@dataclass(frozen=True)
class Failure:
    """One failure report, as pages and the owner's API show it (no runner, no account)."""

    id: int
    """The failed lease's id (the API's paging cursor)."""
    task_id: int
    epoch: int
    benchmark: str
    reason: str
    reported_at: datetime | None


@dataclass(frozen=True)
class ModelFailures:
    """A model and a page of its failure reports (:func:`model_failures`)."""

    model: Model
    failures: list[Failure]


def shorten(text: str, limit: int = SHOWN_REASON_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def report_failure(
    ctx: ServerContext, claimant: Claimant, lease_id: int, attempt: int, reason: str
) -> None:
    """End the lease FAILED with ``reason`` (its slot reopens), then pause its model if
    that completed a streak of failed tasks (see the module docstring)."""
    ctx.queue.release(claimant, lease_id, attempt, ctx.now(), failure=reason)
    if ctx.settings.pause_after_failed_tasks:
        with ctx.db.read_connection() as conn:
            model_id = conn.execute(
                select(Task.model_id)
                .join(Lease, Lease.task_id == Task.id)
                .where(Lease.id == lease_id)
            ).scalar_one()
        pause_if_failing(ctx, model_id)


def pause_if_failing(ctx: ServerContext, model_id: int) -> bool:
    """Pause the model if its latest tasks with an outcome all failed; whether it paused now."""
    settings = ctx.settings
    streak_length = settings.pause_after_failed_tasks
    if not streak_length:
        return False
    need = min(2, settings.quorum)
    now = ctx.now()
    with ctx.db.write_connection() as conn:
        model = conn.execute(_locked_model(ctx, model_id)).one()
        if model.paused_at is not None:
            return False
        since = (model.details or {}).get(RESUMED_AT)
        streak = _failed_streak(conn, model_id, need, since, streak_length)
        if len(streak) < streak_length:
            return False
        reason = _last_reason(conn, streak, since)
        text = (
            f"{streak_length} consecutive tasks failed (tasks "
            f"{', '.join(map(str, sorted(streak)))}, each reported by {need} or more "
            f"accounts' runners, with no result); last reason: {shorten(reason)}"
        )
        paused = conn.execute(
            update(Model)
            .where(Model.id == model_id, Model.paused_at.is_(None))
            .values(paused_at=now, paused_reason=text[:1000])
        ).rowcount
    if paused:
        event(log, "model.paused", model=model_id, failed_tasks=sorted(streak), reason=reason)
    return bool(paused)


def _locked_model(ctx: ServerContext, model_id: int) -> Any:
    query = select(Model.id, Model.paused_at, Model.details).where(Model.id == model_id)
    if ctx.db.dialect == "postgresql":
        # NO KEY UPDATE: inserting a task of this model (a foreign key) does not wait on it
        query = query.with_for_update(key_share=True)
    return query


def _failed_streak(
    conn: Connection, model_id: int, need: int, since: str | None, length: int
) -> list[int]:
    """The model's newest failed tasks, newest first, up to ``length``, stopping at the
    first task with a result (tasks with no outcome yet are skipped)."""
    task_ids = list(
        conn.execute(
            select(Task.id)
            # an edge task (hardware data, services/edge_tasks.py) neither makes nor
            # breaks a streak: a model too big for a runner's edge workload still scores
            .where(Task.model_id == model_id, Task.purpose != TASK_EDGE)
            .order_by(Task.id.desc())
            .limit(SCAN_TASKS)
        ).scalars()
    )
    if not task_ids:
        return []
    failures = (
        select(Lease.task_id, func.count(distinct(Lease.account_id)))
        .where(Lease.task_id.in_(task_ids), Lease.state == LeaseState.FAILED)
        .group_by(Lease.task_id)
    )
    if since is not None:
        failures = failures.where(Lease.ended_at > datetime.fromisoformat(since))
    failed_accounts = {task_id: n for task_id, n in conn.execute(failures)}
    with_results = set(
        conn.execute(
            select(Result.task_id).where(Result.task_id.in_(task_ids)).distinct()
        ).scalars()
    )
    streak: list[int] = []
    for task_id in task_ids:
        if task_id in with_results:
            break
        if failed_accounts.get(task_id, 0) >= need:
            streak.append(task_id)
            if len(streak) == length:
                break
    return streak


def _last_reason(conn: Connection, task_ids: list[int], since: str | None) -> str:
    query = (
        select(Lease.failure)
        .where(Lease.task_id.in_(task_ids), Lease.state == LeaseState.FAILED)
        .order_by(Lease.ended_at.desc(), Lease.id.desc())
        .limit(1)
    )
    if since is not None:
        query = query.where(Lease.ended_at > datetime.fromisoformat(since))
    return conn.execute(query).scalar() or "(none given)"


def _require_owner(principal: Principal, model: Model, action: str) -> None:
    if model.owner_id != principal.account_id and not principal.acts_as_admin:
        raise PermissionDeniedError(
            f"model {model.id} belongs to another account: only its owner (or a request "
            f"with the 'admin' scope) may {action}"
        )


@dataclass(frozen=True)
class Resumed:
    model: Model
    changed: bool
    """False when the model was not paused (nothing was done)."""


def resume_model(ctx: ServerContext, principal: Principal, model_id: int) -> Resumed:
    """Clear a model's pause (its owner, or an admin) and republish its open tasks.

    Resuming a model that is not paused changes nothing. Failures reported before the
    resume no longer count toward a new pause.
    """
    principal.require("model:register")
    now = ctx.now()
    with ctx.db.write() as session:
        model = session.get(
            Model,
            model_id,
            with_for_update={"key_share": True} if ctx.db.dialect == "postgresql" else None,
        )
        if model is None:
            raise NotFoundError(f"no model {model_id}")
        _require_owner(principal, model, "resume it")
        if model.paused_at is None:
            return Resumed(model, changed=False)
        model.paused_at = None
        model.paused_reason = None
        model.details = {**(model.details or {}), RESUMED_AT: now.isoformat()}
        open_tasks = list(
            session.scalars(
                select(Task.id).where(
                    Task.model_id == model_id, Task.finalized_at.is_(None), Task.open_slots > 0
                )
            )
        )
    ctx.queue.publish(open_tasks)
    event(log, "model.resumed", model=model_id, by=principal.name, open_tasks=len(open_tasks))
    return Resumed(model, changed=True)


_FAILURES = (
    select(
        Lease.id,
        Lease.task_id,
        Task.epoch_id,
        Benchmark.name,
        Lease.failure,
        Lease.ended_at,
    )
    .join(Task, Task.id == Lease.task_id)
    .join(Benchmark, Benchmark.id == Task.benchmark_id)
    .where(Lease.state == LeaseState.FAILED)
    .order_by(Lease.id.desc())
)


def _failures(session: Session, query: Any, shorten_to: int | None) -> list[Failure]:
    return [
        Failure(
            row.id,
            row.task_id,
            row.epoch_id,
            row.name,
            shorten(row.failure or "", shorten_to) if shorten_to else (row.failure or ""),
            row.ended_at,
        )
        for row in session.execute(query)
    ]


def recent_failures(
    session: Session, *, model_id: int | None = None, task_id: int | None = None, limit: int = 10
) -> list[Failure]:
    """The newest failure reports of a model or a task, shortened, for the public pages."""
    query = _FAILURES.limit(limit)
    if model_id is not None:
        query = query.where(Task.model_id == model_id)
    if task_id is not None:
        query = query.where(Lease.task_id == task_id)
    return _failures(session, query, SHOWN_REASON_CHARS)


def model_failures(
    ctx: ServerContext,
    principal: Principal,
    model_id: int,
    *,
    limit: int = 50,
    before: int | None = None,
) -> ModelFailures:
    """The model's failure reports, newest first, whole (its owner, or an admin).

    ``before`` pages on: the reports older than the one with that id.
    """
    with ctx.db.read() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise NotFoundError(f"no model {model_id}")
        _require_owner(principal, model, "see its failures")
        query = _FAILURES.where(Task.model_id == model_id).limit(limit)
        if before is not None:
            query = query.where(Lease.id < before)
        return ModelFailures(model, _failures(session, query, None))
