"""Database engines and sessions, built from settings (never at import time).

SQLite runs in WAL mode with a busy timeout; write transactions start with
``BEGIN IMMEDIATE`` so two writers never deadlock on a lock upgrade, and reads use
a separate engine with ordinary deferred transactions so they do not queue behind
writers. Writers of one process also take a process-wide lock first: they queue in
order instead of polling SQLite's busy handler, which sleeps up to 100 ms between
tries and made the slowest writes wait seconds under load (another process's
writers still meet the busy timeout). PostgreSQL uses one pooled engine for both,
with a pool as large as the server's worker threads so no request opens a new
connection.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, create_engine, event, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from quorumbench.errors import ConfigError, DatabaseUnavailableError

Executor = Session | Connection
"""Where statements run: an ORM session or, on hot paths, a plain connection."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
POOL_SIZE = 40
"""Connections kept per engine: the API's worker threads (anyio's default, 40)."""


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=POOL_SIZE if not immediate else 8,
        max_overflow=8,
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
    write_lock: AbstractContextManager[object] = field(default_factory=nullcontext)
    """Taken around every write transaction (a real lock on SQLite)."""

    @property
    def dialect(self) -> str:
        return self.write_engine.dialect.name

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in one write transaction, committed on success."""
        with (
            self.write_lock,
            Session(self.write_engine, expire_on_commit=False) as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """A plain connection in one write transaction (Core statements, no ORM)."""
        with self.write_lock, self.write_engine.begin() as connection:
            yield connection

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A plain connection for reads."""
        with self.read_engine.connect() as connection:
            yield connection

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; closing it ends its transaction, loaded objects stay usable."""
        with Session(self.read_engine, expire_on_commit=False) as session:
            yield session

    def insert(self, entity: Any) -> Any:
        """This dialect's INSERT, which has ``on_conflict_do_nothing`` / ``_do_update``."""
        if self.dialect == "postgresql":
            return postgresql.insert(entity)
        return sqlite.insert(entity)

    def locked_row(
        self, session: Executor, entity: Any, key: dict[str, Any], defaults: dict[str, Any]
    ) -> Any:
        """The row of ``entity`` at primary ``key``, made from ``defaults`` if missing, locked.

        Inserting first (a no-op when the row exists) makes concurrent first writers
        meet on one row instead of racing an INSERT; the row is then read afresh and,
        on PostgreSQL, locked ``FOR UPDATE`` (a SQLite write transaction holds the
        whole database already). Both statements are built once per table and key.
        """
        make, read = _locked_row_statements(entity.__table__, tuple(key), self.dialect)
        session.execute(make, {**defaults, **key})
        return session.execute(read, {f"{name}_": value for name, value in key.items()}).one()

    def dispose(self) -> None:
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


@functools.cache
def _locked_row_statements(table: Table, key: tuple[str, ...], dialect: str) -> tuple[Any, Any]:
    make = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    read = select(table).where(*(table.c[name] == bindparam(f"{name}_") for name in key))
    if dialect == "postgresql":
        read = read.with_for_update()
    return make.on_conflict_do_nothing(), read


def describe_url(url: str) -> str:
    """``url`` as it may be printed and logged: the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is refused elsewhere; print nothing of it
        return "<invalid database URL>"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases, in-memory SQLite and a URL
    that does not parse: :func:`connect` says what is wrong with it)."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def check_connection(db: Database) -> None:
    """One round trip; a DatabaseUnavailableError in one line when it fails."""
    try:
        with db.read_engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise DatabaseUnavailableError(
            f"cannot use the database {describe_url(db.url)}: {_first_line(exc)}"
        ) from exc


def _first_line(exc: SQLAlchemyError) -> str:
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return lines[0] if lines else type(cause).__name__


def connect(url: str) -> Database:
    """Engines for ``url`` (sqlite:/// or postgresql+psycopg://)."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:
        raise ConfigError(f"invalid database URL {url!r}: {exc}") from exc
    if backend == "sqlite":
        return Database(
            url,
            _sqlite_engine(url, immediate=True),
            _sqlite_engine(url, immediate=False),
            threading.Lock(),
        )
    if backend == "postgresql":
        # No pre-ping (a round trip per checkout): a connection the server dropped
        # fails one request, and SQLAlchemy then invalidates the whole pool.
        engine = create_engine(
            url, pool_size=POOL_SIZE, max_overflow=10, pool_recycle=1800, pool_pre_ping=False
        )
        return Database(url, engine, engine)
    raise ConfigError(f"unsupported database {backend!r}: use sqlite or postgresql")


SessionFactory = sessionmaker[Session]
