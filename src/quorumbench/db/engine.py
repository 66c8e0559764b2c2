"""Database engines and sessions, built from settings (never at import time).

SQLite runs in WAL mode with a busy timeout; write transactions start with
``BEGIN IMMEDIATE`` so two writers never deadlock on a lock upgrade, and reads use
a separate engine with ordinary deferred transactions so they do not queue behind
writers. PostgreSQL uses one pooled engine for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from quorumbench.errors import ConfigError

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=8,
        max_overflow=16,
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


@dataclass(frozen=True)
class Database:
    """A write engine and a read engine (the same one except on SQLite)."""

    url: str
    write_engine: Engine
    read_engine: Engine

    @property
    def dialect(self) -> str:
        return self.write_engine.dialect.name

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in one write transaction, committed on success."""
        with Session(self.write_engine, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; closing it ends its transaction, loaded objects stay usable."""
        with Session(self.read_engine, expire_on_commit=False) as session:
            yield session

    def dispose(self) -> None:
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


def connect(url: str) -> Database:
    """Engines for ``url`` (sqlite:/// or postgresql+psycopg://)."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:
        raise ConfigError(f"invalid database URL {url!r}: {exc}") from exc
    if backend == "sqlite":
        return Database(
            url, _sqlite_engine(url, immediate=True), _sqlite_engine(url, immediate=False)
        )
    if backend == "postgresql":
        engine = create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
        return Database(url, engine, engine)
    raise ConfigError(f"unsupported database {backend!r}: use sqlite or postgresql")


SessionFactory = sessionmaker[Session]
