"""A server context on SQLite (or PostgreSQL) with a controllable clock."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from quorumbench.db.engine import sqlite_path
from quorumbench.evaluation.refs import parse_ref
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import ModelMetadata
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..pg import emptied, throwaway_database, url_for
from ..sums import write_sums_spec
from ..templates import copy_sqlite


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class SteadyClock:
    """Real seconds, counted from a fixed instant five seconds into an hour: for a server
    that real runners talk to (their leases and heartbeats run on real time) in a test
    that must not see the hour turn (a new epoch's tasks) wherever it happens to run."""

    def __init__(self, start: datetime = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)) -> None:
        self.start = start
        self.began = time.monotonic()

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=time.monotonic() - self.began)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MATH_ONLY = {"reasoning": 0.0, "coding": 0.0, "math": 1.0, "language": 0.0, "safety": 0.0}
"""Pillar weights that rank a model on the math pillar alone (arith's)."""
TEST_PILLARS = {"sums": "math", "small-sums": "math", "third": "math"}
"""The pillars of the custom benchmarks these tests make (their specs name none)."""


def _settings(url: str, tmp_path, **overrides) -> ServerSettings:
    base = {
        # the servers of these tests run arith (math) and custom math benchmarks: the
        # aggregate is on the math pillar (five pillars: test_pillars.py)
        "pillars": TEST_PILLARS,
        "pillar_weights": MATH_ONLY,
        "data_dir": tmp_path,
        "database_url": url,
        "lease_seconds": 60,
        "quorum": 3,
        "samples_per_task": 4,
        "benchmarks": ["arith"],
        "registrations_per_week": 3,
        "quota_evaluations": 0,
        "canary_rate": 0.0,  # tests that want canaries ask for them
    }
    base.update(overrides)
    return ServerSettings(**base)


def context_on(url: str, folder, clock, template, datasets_dir=None, **overrides) -> ServerContext:
    """A server's context on ``url`` (its data directory ``folder``, its clock ``clock``).
    A SQLite file that does not exist yet starts as a copy of the migrated ``template``."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        copy_sqlite(template, path)
    ctx = build_context(_settings(url, folder, **overrides), datasets_dir=datasets_dir)
    ctx.clock = clock
    return ctx


@pytest.fixture
def make_ctx(tmp_path, clock, sqlite_template):
    """Contexts on ``url`` (default: a SQLite file in ``tmp_path``), as
    :func:`context_on` makes them; closed after the test."""
    made: list[ServerContext] = []

    def make(url: str | None = None, datasets_dir=None, **overrides) -> ServerContext:
        url = url or f"sqlite:///{tmp_path / 'qb.db'}"
        ctx = context_on(url, tmp_path, clock, sqlite_template, datasets_dir, **overrides)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """One throwaway PostgreSQL database per test module (emptied for each test)."""
    with throwaway_database("qb_server", migrated=True) as name:
        yield name


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database URL for tests parametrized over SQLite and PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'server.db'}"
    return emptied(request.getfixturevalue("pg_database"))


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
)
def shared_db_url(request: pytest.FixtureRequest, tmp_path_factory, sqlite_template):
    """A migrated database for a scene that a module's tests share and only read (made
    once per module and backend, then dropped): SQLite, then PostgreSQL."""
    if request.param == "sqlite":
        yield copy_sqlite(sqlite_template, tmp_path_factory.mktemp("shared") / "server.db")
        return
    with throwaway_database("qb_shared", migrated=True) as name:
        yield url_for(name)


@pytest.fixture
def ctx(make_ctx) -> ServerContext:
    return make_ctx()


def fake_metadata(ref: str, *, params: int = 1000, weights: str | None = None) -> ModelMetadata:
    """Metadata as inspect_model would give it, for refs that need no download."""
    parsed = parse_ref(ref)
    return ModelMetadata(
        ref=parsed,
        name=ref.rsplit("/", 1)[-1],
        params=params,
        architecture="LlamaForCausalLM",
        context_length=2048,
        dtype="float32",
        quantization=None,
        license="apache-2.0",
        base_ref=None,
        weights_sha256=weights or uuid.uuid4().hex * 2,
        details={},
    )


def hub_ref(n: int) -> str:
    return f"hf:org/model-{n}@{n:040x}"


@pytest.fixture
def people(ctx):
    """An admin, an owner and five runner accounts, with tokens."""
    create_account(ctx, "admin", is_admin=True)
    names = ["owner", "r1", "r2", "r3", "r4", "r5"]
    for name in names:
        create_account(ctx, name)
    tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
    tokens.update({name: issue_token(ctx, name).token for name in names})
    return tokens


@pytest.fixture
def api(ctx, people):
    """The app in process (Starlette's TestClient) on ``ctx``, with fake model metadata."""
    from fastapi.testclient import TestClient

    from quorumbench.api.app import create_app

    ctx.inspector = lambda ref: fake_metadata(ref, params=1000 if "big" not in ref else 10**12)
    app = create_app(ctx.settings, context=ctx, run_scheduler=False)
    with TestClient(app) as client:
        yield client


@pytest.fixture
def sums_spec(tmp_path):
    """A second benchmark (exact-match, no network), as a custom spec file."""
    return write_sums_spec(tmp_path)
