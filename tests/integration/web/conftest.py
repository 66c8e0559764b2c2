"""Fixtures for the web tests: one seeded server database per module, and a client."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app

from .seed import Seed


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    made = Seed(tmp_path_factory.mktemp("pages"))
    made.fill()
    yield made
    made.ctx.close()


@pytest.fixture(scope="module")
def client(seed):
    app = create_app(seed.ctx.settings, context=seed.ctx, run_scheduler=False)
    with TestClient(app) as running:
        yield running
