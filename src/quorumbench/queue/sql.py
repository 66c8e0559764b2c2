"""The default queue: leases live in the database.

PostgreSQL picks a claimable task with ``FOR UPDATE SKIP LOCKED`` so concurrent
claims never wait on each other; SQLite serializes writers with ``BEGIN
IMMEDIATE`` (see db/engine.py), which keeps each claim a short transaction. The
claimable set is served by the partial index ``ix_tasks_claimable``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.db.engine import Database
from quorumbench.db.models import Benchmark, Epoch, Lease, Model, Task
from quorumbench.errors import LeaseExpiredError, NotFoundError
from quorumbench.queue.base import Claim, Claimant


def task_payload(session: Session, task: Task) -> dict[str, Any]:
    """What a runner needs to evaluate ``task`` (one query)."""
    model, benchmark, epoch = session.execute(
        select(Model, Benchmark, Epoch)
        .select_from(Task)
        .join(Model, Model.id == Task.model_id)
        .join(Benchmark, Benchmark.id == Task.benchmark_id)
        .join(Epoch, Epoch.id == Task.epoch_id)
        .where(Task.id == task.id)
    ).one()
    return {
        "id": task.id,
        "epoch": task.epoch_id,
        "round": task.round,
        "model": {"id": model.id, "ref": model.ref},
        "benchmark": {
            "name": benchmark.name,
            "version": benchmark.version,
            "prompt_version": benchmark.prompt_version,
            "dataset_sha256": benchmark.dataset_sha256,
            "config": benchmark.config,
        },
        "n_samples": task.n_samples,
        "seed": epoch.seed,
        "sample_ids": task.sample_ids,
    }


class SqlTaskQueue:
    """Leases in the database; see the module docstring."""

    def __init__(self, db: Database, lease_seconds: int) -> None:
        self.db = db
        self.lease = timedelta(seconds=lease_seconds)

    def _claimable(self, claimant: Claimant) -> Any:
        owned = select(Model.id).where(Model.owner_id == claimant.account_id)
        already = exists().where(
            Lease.task_id == Task.id,
            Lease.account_id == claimant.account_id,
            Lease.state.in_(("ACTIVE", "SUBMITTED")),
        )
        return (
            select(Task)
            .where(Task.finalized_at.is_(None), Task.open_slots > 0)
            .where(Task.model_id.not_in(owned))
            .where(~already)
            .order_by(Task.priority, Task.id)
        )

    def replay(
        self, claimant: Claimant, key: str | None, now: datetime
    ) -> tuple[Claim | None, str | None]:
        """What an earlier pull with this idempotency key left.

        Returns ``(claim, None)`` when its lease is still active (give it again),
        ``(None, None)`` when the key was used but its lease has ended (a new lease is
        made without the key), and ``(None, key)`` when the key is unused.
        """
        if not key:
            return None, None
        with self.db.read() as session:
            lease = session.scalars(
                select(Lease).where(Lease.runner_id == claimant.runner_id, Lease.pull_key == key)
            ).first()
            if lease is None:
                return None, key
            if lease.state != "ACTIVE" or lease.expires_at <= now:
                return None, None
            task = session.get_one(Task, lease.task_id)
            claim = Claim(
                lease.id, lease.attempt, task.id, lease.expires_at, task_payload(session, task)
            )
            return claim, None

    def claim(self, claimant: Claimant, now: datetime, key: str | None = None) -> Claim | None:
        # A repeated key is rare (a retry after a lost answer), so it is not looked up
        # first: the unique (runner, key) constraint refuses a second lease, and an
        # empty answer is checked against the key before it is given.
        try:
            claim = self._claim(claimant, now, key)
        except IntegrityError:
            prior, unused = self.replay(claimant, key, now)
            if prior is not None:
                return prior
            if unused is not None:
                raise  # not a repeated key: some other constraint
            return self._claim(claimant, now, None)  # its lease has ended: a new one
        if claim is None:
            return self.replay(claimant, key, now)[0]
        return claim

    def _claim(self, claimant: Claimant, now: datetime, key: str | None) -> Claim | None:
        postgres = self.db.dialect == "postgresql"
        with self.db.write() as session:
            passed: list[int] = []
            while True:
                query = self._claimable(claimant)
                if passed:
                    query = query.where(Task.id.not_in(passed))
                query = query.limit(1)
                if postgres:
                    query = query.with_for_update(skip_locked=True, of=Task)
                task = session.scalars(query).first()
                if task is None:
                    return None
                if postgres and self._holds_slot(session, task.id, claimant):
                    passed.append(task.id)
                    continue
                return self.lease_task(session, task, claimant, now, key)

    def _holds_slot(self, session: Session, task_id: int, claimant: Claimant) -> bool:
        """Whether this account holds a slot of the task, seen by a fresh statement.

        On PostgreSQL a row that another runner of the same account leased and
        committed after our snapshot is locked at its new version and its own WHERE
        re-checked, but the NOT EXISTS on leases keeps the old snapshot: without this
        second look, two runners of one account could lease two slots of one task.
        """
        return bool(
            session.scalar(
                select(
                    exists().where(
                        Lease.task_id == task_id,
                        Lease.account_id == claimant.account_id,
                        Lease.state.in_(("ACTIVE", "SUBMITTED")),
                    )
                )
            )
        )

    def lease_task(
        self,
        session: Session,
        task: Task,
        claimant: Claimant,
        now: datetime,
        key: str | None = None,
    ) -> Claim:
        """Create the lease row for one slot of ``task`` (in the caller's transaction)."""
        task.open_slots -= 1
        task.attempts += 1
        lease = Lease(
            task_id=task.id,
            runner_id=claimant.runner_id,
            account_id=claimant.account_id,
            attempt=task.attempts,
            round=task.round,
            state="ACTIVE",
            leased_at=now,
            expires_at=now + self.lease,
            pull_key=key,
        )
        session.add(lease)
        session.flush()
        return Claim(
            lease.id, lease.attempt, task.id, lease.expires_at, task_payload(session, task)
        )

    def _active_lease(
        self, session: Session, claimant: Claimant, lease_id: int, attempt: int, now: datetime
    ) -> Lease:
        query = select(Lease).where(Lease.id == lease_id)
        if self.db.dialect == "postgresql":
            query = query.with_for_update()
        lease = session.scalars(query).first()
        if lease is None or lease.account_id != claimant.account_id:
            raise NotFoundError(f"no lease {lease_id} for this account")
        if lease.attempt != attempt:
            raise LeaseExpiredError(
                f"lease {lease_id} is attempt {lease.attempt}, not {attempt} (superseded)"
            )
        if lease.state != "ACTIVE" or lease.expires_at <= now:
            state = "EXPIRED" if lease.state == "ACTIVE" else lease.state
            raise LeaseExpiredError(f"lease {lease_id} is {state.lower()}, not active")
        return lease

    def heartbeat(self, claimant: Claimant, lease_id: int, attempt: int, now: datetime) -> datetime:
        with self.db.write() as session:
            lease = self._active_lease(session, claimant, lease_id, attempt, now)
            lease.expires_at = now + self.lease
            return lease.expires_at

    def release(self, claimant: Claimant, lease_id: int, attempt: int, now: datetime) -> None:
        with self.db.write() as session:
            lease = self._active_lease(session, claimant, lease_id, attempt, now)
            lease.state, lease.ended_at = "RELEASED", now
            session.execute(
                update(Task).where(Task.id == lease.task_id).values(open_slots=Task.open_slots + 1)
            )
        self.publish([lease.task_id])

    def expire(self, now: datetime) -> int:
        with self.db.write() as session:
            query = (
                select(Lease)
                .where(Lease.state == "ACTIVE", Lease.expires_at <= now)
                .order_by(Lease.task_id, Lease.id)  # one lock order for the task rows
            )
            if self.db.dialect == "postgresql":
                # A lease locked right now is being submitted, heartbeated or released:
                # skip it (the next tick sees its outcome) rather than overwrite that
                # outcome with EXPIRED after it commits.
                query = query.with_for_update(skip_locked=True)
            overdue = session.scalars(query).all()
            for lease in overdue:
                lease.state, lease.ended_at = "EXPIRED", now
                session.execute(
                    update(Task)
                    .where(Task.id == lease.task_id)
                    .values(open_slots=Task.open_slots + 1)
                )
        if overdue:
            self.publish(sorted({lease.task_id for lease in overdue}))
        return len(overdue)

    def publish(self, task_ids: list[int]) -> None:
        """Nothing to do: claimable tasks are found by query."""

    def close(self) -> None:
        """Nothing to close: the database belongs to the caller."""
