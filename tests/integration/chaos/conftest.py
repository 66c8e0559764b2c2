"""Fixtures of the chaos tests: a fresh PostgreSQL database per test.

``QB_TEST_POSTGRES_URL`` (any database on the server; it is used to create and drop
the test's own database) defaults to the local server. An unreachable server skips
the PostgreSQL tests, or fails them when ``QB_REQUIRE_ALL=1`` (as in CI).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql
from sqlalchemy.engine import make_url

POSTGRES_URL = os.environ.get(
    "QB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _url_for(database: str, driver: str = "postgresql+psycopg") -> str:
    url = make_url(POSTGRES_URL).set(drivername=driver, database=database)
    return url.render_as_string(hide_password=False)


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(
        _url_for(make_url(POSTGRES_URL).database or "postgres", "postgresql"),
        autocommit=True,
        connect_timeout=3,
    )


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty database of this test (the server migrates it), dropped afterwards."""
    try:
        _admin().close()
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL is unreachable at {make_url(POSTGRES_URL)!r}: {exc}"
        if os.environ.get("QB_REQUIRE_ALL") == "1":
            pytest.fail(f"QB_REQUIRE_ALL=1 but {reason}")
        pytest.skip(reason)
    name = f"qb_chaos_{secrets.token_hex(4)}"
    with _admin() as conn:
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    try:
        yield _url_for(name)
    finally:
        with _admin() as conn:
            conn.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
            )
