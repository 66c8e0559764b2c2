"""Fixtures of the queue contract suite: one ServerContext per queue backend.

``world`` is parametrized over ``sqlite`` (a copy of the migrated template file),
``postgres`` (a database of this test session, a copy of the migrated template, emptied
before each test) and
``postgres+redis`` (the same, plus RedisStreamTaskQueue on a stream of its own). The
services default to the local ones; ``QB_TEST_POSTGRES_URL`` (any database on the
server: it is used to create and drop the test database) and ``QB_TEST_REDIS_URL``
point elsewhere. An unreachable
service skips its tests, or fails them when ``QB_REQUIRE_ALL=1`` (as in CI).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql as pgsql
from sqlalchemy import func, select

from quorumbench.core.canonical import predictions_digest
from quorumbench.db.engine import Database, connect
from quorumbench.db.models import (
    Account,
    Base,
    Benchmark,
    Epoch,
    Lease,
    Model,
    Result,
    Runner,
    Task,
)
from quorumbench.queue.base import Claim, Claimant, TaskQueue
from quorumbench.queue.redis_streams import RedisStreamTaskQueue
from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services.context import ServerContext
from quorumbench.services.publiclog import ensure_log
from quorumbench.services.results import ResultPayload, SubmitOutcome, submit_result
from quorumbench.settings import QueueSettings, ServerSettings

from ..pg import throwaway_database, unavailable, url_for
from ..templates import copy_sqlite

REDIS_URL = os.environ.get("QB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
LEASE_SECONDS = 30
QUORUM = 3
N_SAMPLES = 2

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param(
        "postgres+redis", id="postgres+redis", marks=[pytest.mark.postgres, pytest.mark.redis]
    ),
]


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A migrated database of this test session, dropped at its end."""
    with throwaway_database("qb_queue", migrated=True) as name:
        yield name


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The session's PostgreSQL database, emptied for this test (cheaper than a new one)."""
    tables = pgsql.SQL(", ").join(
        pgsql.Identifier(table.name) for table in reversed(Base.metadata.sorted_tables)
    )
    with psycopg.connect(url_for(pg_database, "postgresql"), autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(pgsql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(tables))
    return url_for(pg_database)


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis is unreachable at {REDIS_URL}: {exc}")
    finally:
        client.close()
    return REDIS_URL


@dataclass
class FakeClock:
    """A clock the test moves by hand."""

    now: datetime = field(default_factory=lambda: datetime(2025, 1, 6, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass
class World:
    """A ServerContext on one backend plus helpers that seed rows through the ORM."""

    backend: str
    ctx: ServerContext
    clock: FakeClock
    benchmark_id: int
    epoch_id: int
    names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def db(self) -> Database:
        return self.ctx.db

    @property
    def queue(self) -> TaskQueue:
        return self.ctx.queue

    def account(self) -> Claimant:
        """A new account with one runner."""
        now = self.clock.now
        n = next(self.names)
        with self.db.write() as session:
            account = Account(name=f"acct-{n}", is_admin=False, created_at=now)
            session.add(account)
            session.flush()
            runner = Runner(
                account_id=account.id,
                name="r0",
                public_key=None,
                created_at=now,
                last_seen_at=now,
                agreements=0,
                outliers=0,
                suspended=False,
            )
            session.add(runner)
            session.flush()
            return Claimant(account.id, runner.id)

    def second_runner(self, claimant: Claimant) -> Claimant:
        with self.db.write() as session:
            runner = Runner(
                account_id=claimant.account_id,
                name=f"r{next(self.names)}",
                public_key=None,
                created_at=self.clock.now,
                last_seen_at=None,
                agreements=0,
                outliers=0,
                suspended=False,
            )
            session.add(runner)
            session.flush()
            return Claimant(claimant.account_id, runner.id)

    def tasks(self, owner: Claimant, count: int = 1, *, quorum: int = QUORUM) -> list[int]:
        """``count`` tasks, each of a new model of ``owner``; published to the queue."""
        now = self.clock.now
        ids = []
        with self.db.write() as session:
            for _ in range(count):
                n = next(self.names)
                model = Model(
                    ref=f"hf:test/model-{n}@{n:040x}",
                    name=f"test/model-{n}",
                    owner_id=owner.account_id,
                    revision=f"{n:040x}",
                    details={},
                    active=True,
                    created_at=now,
                )
                session.add(model)
                session.flush()
                task = Task(
                    model_id=model.id,
                    benchmark_id=self.benchmark_id,
                    epoch_id=self.epoch_id,
                    n_samples=N_SAMPLES,
                    status="PENDING",
                    round=1,
                    quorum=quorum,
                    open_slots=quorum,
                    attempts=0,
                    sample_ids=[str(i) for i in range(N_SAMPLES)],
                    priority=0,
                    created_at=now,
                    finalized_at=None,
                )
                session.add(task)
                session.flush()
                ids.append(task.id)
        self.queue.publish(ids)
        return ids

    def claim(self, claimant: Claimant, key: str | None = None) -> Claim | None:
        return self.queue.claim(claimant, self.clock.now, key)

    def payload(self, task_id: int, scores: list[float]) -> ResultPayload:
        return ResultPayload(
            task_id=task_id,
            score=sum(scores) / len(scores),
            n=len(scores),
            sample_ids=[str(i) for i in range(len(scores))],
            sample_scores=scores,
            sample_output_hashes=[hashlib.sha256(str(s).encode()).hexdigest() for s in scores],
            outputs_sha256="ab" * 32,
            sample_predictions=[str(s) for s in scores],
            predictions_sha256=predictions_digest(str(s) for s in scores),
            runtime_s=1.5,
            hardware={"device": "test"},
        )

    def submit(self, claimant: Claimant, claim: Claim, score: float = 1.0) -> SubmitOutcome:
        payload = self.payload(claim.task_id, [score] * N_SAMPLES)
        return submit_result(self.ctx, claimant, claim.lease_id, claim.attempt, payload)

    def task(self, task_id: int) -> Task:
        with self.db.read() as session:
            task = session.get_one(Task, task_id)
            session.expunge(task)  # keep its loaded state after the read's rollback
            return task

    def results(self, task_id: int) -> list[Result]:
        with self.db.read() as session:
            results = list(session.scalars(select(Result).where(Result.task_id == task_id)))
            session.expunge_all()
            return results

    def active_leases(self, task_id: int) -> int:
        with self.db.read() as session:
            return (
                session.scalar(
                    select(func.count())
                    .select_from(Lease)
                    .where(Lease.task_id == task_id, Lease.state == "ACTIVE")
                )
                or 0
            )


def _seed_static(db: Database, now: datetime) -> tuple[int, int]:
    with db.write() as session:
        benchmark = Benchmark(
            name="arith",
            version=1,
            prompt_version=1,
            kind="generate",
            dataset_sha256="0" * 64,
            config={},
            samples_per_task=N_SAMPLES,
            weight=1.0,
            active=True,
            created_at=now,
        )
        seed = secrets.token_hex(32)
        index = int(now.timestamp()) // 3600
        epoch = Epoch(
            id=index,
            starts_at=datetime.fromtimestamp(index * 3600, UTC),
            ends_at=datetime.fromtimestamp((index + 1) * 3600, UTC),
            seed=seed,
            seed_commitment=hashlib.sha256(seed.encode()).hexdigest(),
            scheduled_at=None,
        )
        session.add_all([benchmark, epoch])
        session.flush()
        return benchmark.id, epoch.id


def build_world(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, **queue_options: Any
) -> Iterator[World]:
    clock = FakeClock()
    if backend == "sqlite":
        url = copy_sqlite(request.getfixturevalue("sqlite_template"), tmp_path / "quorumbench.db")
        db = connect(url)
    else:
        url = request.getfixturevalue("pg_url")
        db = connect(url)
    sql = SqlTaskQueue(db, LEASE_SECONDS)
    queue: TaskQueue = sql
    queue_settings = QueueSettings()
    stream = f"qb:test:{secrets.token_hex(6)}"
    if backend == "postgres+redis":
        url_r = request.getfixturevalue("redis_url")
        queue_settings = QueueSettings(backend="redis", redis_url=url_r, stream=stream)
        queue = RedisStreamTaskQueue(sql, url_r, stream, **queue_options)
    settings = ServerSettings(
        data_dir=tmp_path,
        database_url=url,
        lease_seconds=LEASE_SECONDS,
        quorum=QUORUM,
        agreement_threshold=0.5,
        canary_rate=0.0,
        queue=queue_settings,
    )
    ctx = ServerContext(settings, db, queue, clock)
    ctx.log_signer = ensure_log(ctx)  # as a server's start does: the key, the empty tree's head
    try:
        benchmark_id, epoch_id = _seed_static(db, clock.now)
        yield World(backend, ctx, clock, benchmark_id, epoch_id)
    finally:
        if isinstance(queue, RedisStreamTaskQueue):
            queue.redis.delete(queue.stream, queue.counts)
        ctx.close()


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The same seeded server on each queue backend."""
    yield from build_world(request, tmp_path, request.param)


@pytest.fixture(
    params=[
        pytest.param(
            "postgres+redis", id="postgres+redis", marks=[pytest.mark.postgres, pytest.mark.redis]
        )
    ]
)
def redis_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The Redis Streams queue only, re-queuing stalled entries at once (for its own tests)."""
    yield from build_world(request, tmp_path, request.param, reclaim_after=timedelta(0))
