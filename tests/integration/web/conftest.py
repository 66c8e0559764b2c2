"""Fixtures for the web tests: one seeded server database per module (SQLite, then
PostgreSQL), and a client."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app

from ..pg import emptied, throwaway_database
from .browser import serve_site
from .seed import Seed


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
)
def seed(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pages")
    if request.param == "sqlite":
        made = Seed(tmp)
        made.fill()
        yield made
        made.ctx.close()
        return
    with throwaway_database("qb_web", migrated=True) as name:
        made = Seed(tmp, emptied(name))
        made.fill()
        yield made
        made.ctx.close()


@pytest.fixture(scope="module")
def client(seed):
    app = create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)
    with TestClient(app) as running:
        yield running


@pytest.fixture(scope="module")
def site_pg():
    """One throwaway PostgreSQL database per module for the sign-in tests."""
    with throwaway_database("qb_site", migrated=True) as name:
        yield name


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def site(request, tmp_path):
    """A server with the development sign-in on, per test, on SQLite and PostgreSQL."""
    url = None if request.param == "sqlite" else emptied(request.getfixturevalue("site_pg"))
    with serve_site(tmp_path, url) as made:
        yield made
