"""The default queue: leases live in the database.

A claim is two statements in one short write transaction: an ``UPDATE … RETURNING``
that takes a slot of the first claimable task (found through the partial index
``ix_tasks_claimable``), and the ``INSERT`` of the lease. PostgreSQL picks the task
with ``FOR UPDATE SKIP LOCKED`` so concurrent claims never wait on each other; SQLite
serializes writers with ``BEGIN IMMEDIATE`` (see db/engine.py). Both statements are
built once and run on a plain connection: this is the server's hottest path.

One account holds at most one live (active or submitted) lease per task. The claim
query skips tasks where it holds one (or where it reported a failure), and the
unique partial index ``uq_leases_live_task_account`` makes it a guarantee: on
PostgreSQL a lease that another runner of the same account committed after our
snapshot can escape the query, and its INSERT then fails and the claim is retried on
a fresh snapshot. The claim also skips the tasks of paused models
(services/failures.py) and of retired ones (services/models.py).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from cachetools import LRUCache
from sqlalchemy import (
    BindParameter,
    Boolean,
    ColumnElement,
    Connection,
    Integer,
    Select,
    String,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased

from quorumbench import protocol
from quorumbench.db.engine import Database
from quorumbench.db.models import TASK_EDGE, Benchmark, Epoch, Lease, LeaseState, Model, Task
from quorumbench.errors import LeaseExpiredError, NotFoundError
from quorumbench.protocol import TaskBenchmark, TaskModel
from quorumbench.queue.base import Claim, Claimant

LIVE_STATES = (LeaseState.ACTIVE, LeaseState.SUBMITTED)
"""Lease states that hold a task slot for the account (see the unique index above)."""
BARRED_STATES = (*LIVE_STATES, LeaseState.FAILED)
"""An account is not offered a task it holds a live lease of, or reported it failed."""

CLAIM_TRIES = 3

_ACCOUNT = bindparam("account_id", type_=Integer)
_EDGE_OK = bindparam("edge_ok", type_=Boolean)
"""Whether the claiming runner runs edge tasks (``Claimant.edge``)."""
_ENGINES: BindParameter[str] = bindparam("engines", expanding=True)
"""The engines the claiming runner has (``Claimant.engines``)."""
_GGUF_ADAPTERS_OK = bindparam("gguf_adapters_ok", type_=Boolean)
"""Whether its llama.cpp engine runs LoRA adapters (``Claimant.gguf_adapters``)."""
_BARRED = Lease.state.in_([literal_column(f"'{state}'") for state in BARRED_STATES])
"""``state IN ('ACTIVE', 'SUBMITTED', 'FAILED')`` with the states written into the SQL."""


_ZERO: ColumnElement[int] = literal_column("0")


def eligible(task: Any) -> list[ColumnElement[bool]]:
    """Conditions for the account ``:account_id`` to take a slot of ``task`` (a Task alias).

    Written for PostgreSQL's plan cache: constants are in the SQL text (so a generic
    plan can still use the partial index ``ix_tasks_claimable``), and both account
    checks are per-row index lookups that the planner cannot turn into a join over
    all of the account's leases. A paused or retired model's tasks are not claimable:
    the owner lookup finds no row for it, and ``NULL != :account_id`` is not true.
    An edge task is claimable only by a runner that runs them (``:edge_ok``), a model's
    task only by a runner that has the model's engine (``:engines``), an ``hf:`` adapter
    on llama.cpp only by one whose engine runs them (``:gguf_adapters_ok``; the owner
    lookup finds no row otherwise).
    """
    owner = (
        select(Model.owner_id)
        .where(
            Model.id == task.model_id,
            Model.paused_at.is_(None),
            Model.retired_at.is_(None),
            or_(Model.engine.is_(None), Model.engine.in_(_ENGINES)),
            or_(
                _GGUF_ADAPTERS_OK,
                Model.engine.is_(None),
                Model.engine != "llamacpp",
                ~Model.ref.startswith("hf:"),
            ),
        )
        .scalar_subquery()
    )
    held = select(func.count()).where(
        Lease.task_id == task.id, Lease.account_id == _ACCOUNT, _BARRED
    )
    return [
        task.finalized_at.is_(None),
        task.open_slots > _ZERO,
        owner != _ACCOUNT,
        held.scalar_subquery() == _ZERO,
        or_(task.purpose != literal_column(f"'{TASK_EDGE}'"), _EDGE_OK),
    ]


_TAKEN = (
    Task.id,
    Task.attempts,
    Task.round,
    Task.model_id,
    Task.benchmark_id,
    Task.epoch_id,
    Task.n_samples,
    Task.sample_ids,
)


def _take_slot(which: Any, *conditions: ColumnElement[bool]) -> Any:
    """``UPDATE tasks`` taking one slot of the task ``which`` selects, if ``conditions``."""
    return (
        update(Task)
        .where(Task.id == which, *conditions)
        .values(open_slots=Task.open_slots - 1, attempts=Task.attempts + 1)
        .returning(*_TAKEN)
    )


_QUEUE_ORDER_PLAN = select(
    func.set_config("enable_bitmapscan", "off", True),
    func.set_config("enable_seqscan", "off", True),
    func.set_config("enable_sort", "off", True),
)
"""PostgreSQL, for this transaction: walk ``ix_tasks_claimable`` in queue order.

The first claimable task should be found by reading the claimable index in order and
stopping at the first row this account may take. With statistics that undercount the
claimable tasks, PostgreSQL's planner instead checks every claimable task and sorts
them, one claim costing as much as the whole queue (seen with 2,000 pending tasks:
3x the database CPU, half the claims per second). These settings rule that out.
"""


def _first_claimable(postgres: bool) -> Any:
    pick = aliased(Task, name="pick")
    query: Select[Any] = (
        select(pick.id).where(*eligible(pick)).order_by(pick.priority, pick.id).limit(1)
    )
    if postgres:
        query = query.with_for_update(skip_locked=True)
    return query.scalar_subquery()


class _Sources(NamedTuple):
    model: TaskModel
    benchmark: TaskBenchmark
    seed_commitment: str


class TaskSources:
    """What a runner needs to know about a task's model, benchmark and epoch.

    These rows never change once written (a model's ref is pinned, a benchmark
    version is immutable, an epoch's seed commitment is made when it opens), so they
    are remembered per process instead of joined into every claim. The epoch's seed
    itself is not handed out: it stays secret until the epoch is over.
    """

    def __init__(self, maxsize: int = 20_000) -> None:
        self._cache: LRUCache[tuple[int, int, int], _Sources] = LRUCache(maxsize)
        self._lock = threading.Lock()
        self._query = (
            select(
                Model.id.label("model_id"),
                Model.ref,
                Model.revision,
                Model.engine,
                Benchmark.name,
                Benchmark.version,
                Benchmark.prompt_version,
                Benchmark.dataset_sha256,
                Benchmark.config,
                Benchmark.kind,
                Benchmark.spec,
                Epoch.seed_commitment,
            )
            .select_from(Model)
            .join(Benchmark, true())  # three rows, each picked by its id
            .join(Epoch, true())
        ).where(
            Model.id == bindparam("model_id"),
            Benchmark.id == bindparam("benchmark_id"),
            Epoch.id == bindparam("epoch_id"),
        )

    def get(self, conn: Connection, model_id: int, benchmark_id: int, epoch_id: int) -> _Sources:
        key = (model_id, benchmark_id, epoch_id)
        with self._lock:
            known = self._cache.get(key)
        if known is not None:
            return known
        row = conn.execute(
            self._query,
            {"model_id": model_id, "benchmark_id": benchmark_id, "epoch_id": epoch_id},
        ).one()
        found = _Sources(
            TaskModel(id=row.model_id, ref=row.ref, revision=row.revision, engine=row.engine),
            TaskBenchmark(
                name=row.name,
                version=row.version,
                prompt_version=row.prompt_version,
                dataset_sha256=row.dataset_sha256,
                config=row.config,
                kind="edge" if row.kind == "edge" else None,
                spec_json=None if row.spec is None else json.dumps(row.spec, sort_keys=True),
            ),
            row.seed_commitment,
        )
        with self._lock:
            self._cache[key] = found
        return found


class SqlTaskQueue:
    """Leases in the database; see the module docstring."""

    def __init__(self, db: Database, lease_seconds: int) -> None:
        self.db = db
        self.lease = timedelta(seconds=lease_seconds)
        self.sources = TaskSources()
        postgres = self._postgres = db.dialect == "postgresql"
        # The first claimable task is checked (and, on PostgreSQL, locked) by the
        # subquery itself; a given task is checked by the UPDATE.
        self._take_first = _take_slot(_first_claimable(postgres))
        self._take_this = _take_slot(bindparam("task_id", type_=Integer), *eligible(Task))
        self._insert_lease = insert(Lease).returning(Lease.id)
        lease_by_key = select(Lease.id, Lease.attempt, Lease.task_id, Lease.state, Lease.expires_at)
        self._by_key = lease_by_key.where(
            Lease.runner_id == bindparam("runner_id", type_=Integer),
            Lease.pull_key == bindparam("pull_key", type_=String),
        )
        self._task_row = select(*_TAKEN).where(Task.id == bindparam("task_id", type_=Integer))

    # --- claiming ------------------------------------------------------------------

    def claim(self, claimant: Claimant, now: datetime, key: str | None = None) -> Claim | None:
        # A repeated key is rare (a retry after a lost answer), so it is not looked up
        # first: the unique (runner, key) constraint refuses a second lease, and an
        # empty answer is checked against the key before it is given.
        for tries_left in reversed(range(CLAIM_TRIES)):
            try:
                with self.db.write_connection() as conn:
                    claim = self.take(conn, claimant, now, key)
            except IntegrityError:
                prior, unused = self.replay(claimant, key, now)
                if prior is not None:
                    return prior
                if unused is None:
                    key = None  # the key's lease has ended: make a new one without it
                elif not tries_left:
                    raise
                # else another runner of this account leased the same task after our
                # snapshot (PostgreSQL): a fresh snapshot skips that task
                continue
            if claim is None:
                return self.replay(claimant, key, now)[0]
            return claim
        return None

    def take(
        self,
        conn: Connection,
        claimant: Claimant,
        now: datetime,
        key: str | None,
        task_id: int | None = None,
    ) -> Claim | None:
        """Lease a slot of the first claimable task, or of ``task_id`` if it is claimable.

        Runs in the caller's write transaction; None when there is no such slot.
        """
        params: dict[str, Any] = {
            "account_id": claimant.account_id,
            "edge_ok": claimant.edge,
            "engines": list(claimant.engines),
            "gguf_adapters_ok": claimant.gguf_adapters,
        }
        if task_id is None:
            statement = self._take_first
            if self._postgres:
                conn.execute(_QUEUE_ORDER_PLAN)
        else:
            statement, params["task_id"] = self._take_this, task_id
        taken = conn.execute(statement, params).first()
        if taken is None:
            return None
        expires = now + self.lease
        lease_id = conn.execute(
            self._insert_lease,
            {
                "task_id": taken.id,
                "runner_id": claimant.runner_id,
                "account_id": claimant.account_id,
                "attempt": taken.attempts,
                "round": taken.round,
                "state": LeaseState.ACTIVE,
                "leased_at": now,
                "expires_at": expires,
                "pull_key": key,
            },
        ).scalar_one()
        return Claim(lease_id, taken.attempts, taken.id, expires, self._payload(conn, taken))

    def _payload(self, conn: Connection, task: Any) -> protocol.Task:
        """What a runner needs to evaluate ``task`` (a row with the ``_TAKEN`` columns)."""
        sources = self.sources.get(conn, task.model_id, task.benchmark_id, task.epoch_id)
        return protocol.Task(
            id=task.id,
            epoch=task.epoch_id,
            round=task.round,
            model=sources.model,
            benchmark=sources.benchmark,
            n_samples=task.n_samples,
            seed_commitment=sources.seed_commitment,
            sample_ids=task.sample_ids,
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
        with self.db.read_connection() as conn:
            lease = conn.execute(
                self._by_key, {"runner_id": claimant.runner_id, "pull_key": key}
            ).first()
            if lease is None:
                return None, key
            if lease.state != LeaseState.ACTIVE or lease.expires_at <= now:
                return None, None
            task = conn.execute(self._task_row, {"task_id": lease.task_id}).one()
            claim = Claim(
                lease.id, lease.attempt, task.id, lease.expires_at, self._payload(conn, task)
            )
            return claim, None

    # --- heartbeat, release, expiry ------------------------------------------------

    def _active_lease(
        self, conn: Connection, claimant: Claimant, lease_id: int, attempt: int, now: datetime
    ) -> Any:
        query = select(Lease.id, Lease.task_id, Lease.account_id, Lease.attempt, Lease.state)
        query = query.add_columns(Lease.expires_at).where(Lease.id == lease_id)
        if self.db.dialect == "postgresql":
            query = query.with_for_update()
        lease = conn.execute(query).first()
        if lease is None or lease.account_id != claimant.account_id:
            raise NotFoundError(f"no lease {lease_id} for this account")
        if lease.attempt != attempt:
            raise LeaseExpiredError(
                f"lease {lease_id} is attempt {lease.attempt}, not {attempt} (superseded)"
            )
        if lease.state != LeaseState.ACTIVE or lease.expires_at <= now:
            state = LeaseState.EXPIRED if lease.state == LeaseState.ACTIVE else lease.state
            raise LeaseExpiredError(f"lease {lease_id} is {state.lower()}, not active")
        return lease

    def heartbeat(self, claimant: Claimant, lease_id: int, attempt: int, now: datetime) -> datetime:
        with self.db.write_connection() as conn:
            self._active_lease(conn, claimant, lease_id, attempt, now)
            expires = now + self.lease
            conn.execute(update(Lease).where(Lease.id == lease_id).values(expires_at=expires))
            return expires

    def release(
        self,
        claimant: Claimant,
        lease_id: int,
        attempt: int,
        now: datetime,
        failure: str | None = None,
    ) -> None:
        state = LeaseState.RELEASED if failure is None else LeaseState.FAILED
        with self.db.write_connection() as conn:
            lease = self._active_lease(conn, claimant, lease_id, attempt, now)
            conn.execute(
                update(Lease)
                .where(Lease.id == lease_id)
                .values(state=state, ended_at=now, failure=failure)
            )
            conn.execute(
                update(Task).where(Task.id == lease.task_id).values(open_slots=Task.open_slots + 1)
            )
        self.publish([lease.task_id])

    def expire(self, now: datetime) -> int:
        with self.db.write_connection() as conn:
            query = (
                select(Lease.id, Lease.task_id)
                .where(Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
                .order_by(Lease.task_id, Lease.id)  # one lock order for the task rows
            )
            if self.db.dialect == "postgresql":
                # A lease locked right now is being submitted, heartbeated or released:
                # skip it (the next tick sees its outcome) rather than overwrite that
                # outcome with EXPIRED after it commits.
                query = query.with_for_update(skip_locked=True)
            overdue = conn.execute(query).all()
            for lease in overdue:
                conn.execute(
                    update(Lease)
                    .where(Lease.id == lease.id)
                    .values(state=LeaseState.EXPIRED, ended_at=now)
                )
                conn.execute(
                    update(Task)
                    .where(Task.id == lease.task_id)
                    .values(open_slots=Task.open_slots + 1)
                )
        if overdue:
            self.publish(sorted({lease.task_id for lease in overdue}))
        return len(overdue)

    def publish(self, task_ids: list[int]) -> None:
        """Nothing to do: claimable tasks are found by query."""

    def check(self) -> list[str]:
        """The database is the queue: checked as the database (services/health.py)."""
        return []

    def describe(self) -> str:
        return "sql (in the database)"

    def close(self) -> None:
        """Nothing to close: the database belongs to the caller."""
