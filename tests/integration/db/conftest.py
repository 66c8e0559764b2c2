"""Fixtures of the migration tests: an empty database per test, on SQLite and PostgreSQL.

``empty_url`` is parametrized over ``sqlite`` (a temporary file) and ``postgres`` (a
schema of its own, created for the test and dropped after it, in a database created
for the test session and dropped at its end; the tests never touch the shared
``postgres``/``test`` databases or each other). ``QB_TEST_POSTGRES_URL`` (any
database on the server: it is used to create and drop the session database) points
elsewhere than the local server. An unreachable PostgreSQL skips its tests, or fails
them when ``QB_REQUIRE_ALL=1`` (as in CI); the same approach as
``tests/integration/queue/conftest.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql as pgsql
from sqlalchemy.engine import make_url

from quorumbench.db.engine import Database, connect

from ..pg import execute, throwaway_database, url_for

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throwaway database of this test session, dropped at its end.

    Skips (or fails under ``QB_REQUIRE_ALL=1``) when PostgreSQL is unreachable.
    """
    with throwaway_database("qb_migrations") as name:
        yield name


@pytest.fixture
def pg_empty_url(pg_database: str) -> Iterator[str]:
    """A new, empty schema for this test (first on the search path of the URL), dropped after.

    A schema is much cheaper than a database per test and just as isolated: the
    migrations, ``alembic_version`` and reflection all work in the current schema.
    """
    schema = f"qb_{secrets.token_hex(6)}"
    execute(pg_database, pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
    url = make_url(url_for(pg_database)).update_query_dict({"options": f"-csearch_path={schema}"})
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(False)) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        assert row == (schema,), f"search_path not applied: {row}"
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        execute(pg_database, pgsql.SQL("DROP SCHEMA {} CASCADE").format(pgsql.Identifier(schema)))


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database (no tables, no alembic_version) on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'quorumbench.db'}"
    url: str = request.getfixturevalue("pg_empty_url")
    return url


@pytest.fixture
def db(empty_url: str) -> Iterator[Database]:
    """Engines on the empty database, disposed after the test."""
    database = connect(empty_url)
    try:
        yield database
    finally:
        database.dispose()
