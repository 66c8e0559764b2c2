"""Fixtures of the chaos tests: a fresh PostgreSQL database per test (a copy of the
migrated template).

``QB_TEST_POSTGRES_URL`` (any database on the server; it is used to create and drop
the test's own database) defaults to the local server. An unreachable server skips
the PostgreSQL tests, or fails them when ``QB_REQUIRE_ALL=1`` (as in CI).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..pg import throwaway_database, url_for


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new database of this test at the newest schema, dropped afterwards."""
    with throwaway_database("qb_chaos", migrated=True) as name:
        yield url_for(name)
