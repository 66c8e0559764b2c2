"""Throwaway PostgreSQL databases for the integration tests.

``QB_TEST_POSTGRES_URL`` names any database on the server (default: the local
``postgres`` database); it is used only to create and drop the tests' own databases.
An unreachable server skips the test, or fails it when ``QB_REQUIRE_ALL=1`` (CI).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql
from sqlalchemy.engine import make_url

from .templates import migrations_digest

REQUIRE_ALL = os.environ.get("QB_REQUIRE_ALL") == "1"
POSTGRES_URL = os.environ.get(
    "QB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def unavailable(reason: str) -> None:
    """Skip, or fail under ``QB_REQUIRE_ALL=1``."""
    if REQUIRE_ALL:
        pytest.fail(f"QB_REQUIRE_ALL=1 but {reason}")
    pytest.skip(reason)


def url_for(database: str, driver: str = "postgresql+psycopg") -> str:
    """The URL of ``database`` on the test server (SQLAlchemy or, with "postgresql", libpq)."""
    url = make_url(POSTGRES_URL).set(drivername=driver, database=database)
    return url.render_as_string(hide_password=False)


def admin() -> psycopg.Connection[Any]:
    """An autocommit connection to the server's admin database."""
    return psycopg.connect(
        url_for(make_url(POSTGRES_URL).database or "postgres", "postgresql"),
        autocommit=True,
        connect_timeout=3,
    )


def execute(database: str, statement: pgsql.Composable | str) -> None:
    """Run one statement in ``database`` (autocommit)."""
    with psycopg.connect(url_for(database, "postgresql"), autocommit=True) as conn:
        conn.execute(statement)


TEMPLATE_LOCK = 0x51425445  # "QBTE": pg_advisory_lock's key while a template is made


@functools.cache
def template_database() -> str:
    """The migrated template database of these migrations: made once (by whichever test
    process gets the server's advisory lock first), then copied by
    ``throwaway_database(migrated=True)``. Templates of other migrations are dropped."""
    name = f"qb_template_{migrations_digest()}"
    with admin() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK,))
        try:
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE 'qb\\_template\\_%'"
                )
            ]
            for stale in names:
                if stale != name:  # another checkout's migrations; busy ones stay
                    with contextlib.suppress(psycopg.errors.ObjectInUse):
                        conn.execute(
                            pgsql.SQL("DROP DATABASE IF EXISTS {}").format(pgsql.Identifier(stale))
                        )
            if name not in names:
                staging = f"qb_staging_{secrets.token_hex(4)}"
                conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(staging)))
                try:
                    _upgrade(url_for(staging))
                    conn.execute(
                        pgsql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                            pgsql.Identifier(staging), pgsql.Identifier(name)
                        )
                    )
                except BaseException:
                    conn.execute(
                        pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            pgsql.Identifier(staging)
                        )
                    )
                    raise
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))
    return name


@contextmanager
def throwaway_database(prefix: str, *, migrated: bool = False) -> Iterator[str]:
    """A new database named ``<prefix>_<random>``, dropped on exit; yields its name.

    Empty, or with ``migrated`` a copy of the migrated template (the newest schema,
    no rows but what the migrations insert)."""
    try:
        admin().close()
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL is unreachable at {make_url(POSTGRES_URL)!r}: {exc}")
    name = f"{prefix}_{secrets.token_hex(4)}"
    create = pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name))
    if migrated:
        template = template_database()
        create = pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            pgsql.Identifier(name), pgsql.Identifier(template)
        )
    with admin() as conn:
        conn.execute(create)
    try:
        yield name
    finally:
        with admin() as conn:
            conn.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
            )


@functools.cache
def _head() -> str:
    from quorumbench.db.migrate import head_revision

    return head_revision()


def emptied(database: str) -> str:
    """The URL of ``database``, migrated to the newest schema and with every table empty.

    For tests parametrized over SQLite and one module-wide PostgreSQL database. The
    rows go by ``DELETE`` in one transaction, children first, and the sequences start
    again at 1: on tables of a few rows that took 0.06 s where ``TRUNCATE … RESTART
    IDENTITY`` took 0.26–0.31 s (it makes new files for every table and index).
    """
    url = url_for(database)
    with psycopg.connect(url_for(database, "postgresql"), autocommit=True) as conn:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except psycopg.errors.UndefinedTable:
            row = None
        # also after a test that stopped between a downgrade and an upgrade
        if row is None or row[0] != _head():
            _upgrade(url)
        with conn.transaction():
            for table in _tables_children_first():
                conn.execute(pgsql.SQL("DELETE FROM {}").format(pgsql.Identifier(table)))
            sequences = conn.execute(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()"
            ).fetchall()
            for (sequence,) in sequences:
                conn.execute(
                    pgsql.SQL("ALTER SEQUENCE {} RESTART").format(pgsql.Identifier(sequence))
                )
    return url


def _upgrade(url: str) -> None:
    from quorumbench.db.engine import connect
    from quorumbench.db.migrate import upgrade

    db = connect(url)
    try:
        upgrade(db)
    finally:
        db.dispose()


@functools.cache
def _tables_children_first() -> tuple[str, ...]:
    from quorumbench.db.models import Base

    return tuple(table.name for table in reversed(Base.metadata.sorted_tables))
