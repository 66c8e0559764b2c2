"""Asks with a person's own endpoint, evaluated live by the server's worker pool
(``services/live.py``) against a real HTTP endpoint on loopback that checks its key.

The benchmark is the custom ``sums`` spec (20 items, "Q: i + 1?"); the endpoint always
answers "7", so exactly one item (s6) is right: n 20, score 1/20, and the interval is
the Clopper-Pearson one of 1 in 20.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from pydantic import SecretStr
from sqlalchemy import select, text

from quorumbench.ask_settings import AskSettings
from quorumbench.core.intervals import score_interval
from quorumbench.db.ask_models import Ask, StoredPlan
from quorumbench.db.models import LeaderboardAggregate, LeaderboardEntry, LogEntry, Model, Task
from quorumbench.errors import (
    AuthenticationError,
    InvalidPlanError,
    NotFoundError,
    RateLimitedError,
    ServiceUnavailableError,
)
from quorumbench.services import asks
from quorumbench.services.accounts import create_account
from quorumbench.services.asks import KEY_NOT_KEPT, AskStatus, EndpointRequest
from quorumbench.services.live import stop_pool

from .endpoint_server import serve_endpoint

KEY = "sk-live-ask-SECRET-0xC0FFEE-91"
PLAN = {"benchmarks": ["sums"], "budget": 20, "versions": {"seed": "5eed"}}
DEFAULT_RPS = AskSettings.model_fields["ask_endpoint_rps"].default
LIVE = {"ask_allow_private_endpoints": True, "ask_workers": 2, "ask_endpoint_rps": 0}
"""Live asks against the loopback endpoint, unpaced: the default pace (5 requests per
second to one URL) would make each 20-item ask wait 4 s. The pace is checked end to end
in the full ask below, with the server's default, and in tests/unit/services/test_asks.py."""


def wait_until_done(ctx, ask_id, owner, timeout=60.0) -> asks.AskView:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        view = asks.view(ctx, ask_id, owner)
        seen.append(view.status)
        if view.status in (AskStatus.SUCCESS, AskStatus.FAILURE):
            return view
        time.sleep(0.05)
    raise AssertionError(f"the ask did not end: {seen[-5:]}")


@pytest.fixture
def live_ctx(make_ctx, sums_spec, db_url):
    return make_ctx(db_url, benchmarks=[sums_spec], **LIVE)


@pytest.fixture
def paced_ctx(make_ctx, sums_spec, db_url):
    """Live asks at the server's default pace per endpoint URL."""
    return make_ctx(db_url, benchmarks=[sums_spec], **{**LIVE, "ask_endpoint_rps": DEFAULT_RPS})


def accounts_of(ctx):
    return create_account(ctx, "alice").id, create_account(ctx, "bob").id


def test_a_full_ask_with_an_endpoint_and_its_key(paced_ctx, caplog):
    ctx = paced_ctx
    alice, bob = accounts_of(ctx)
    caplog.set_level(logging.DEBUG)
    with serve_endpoint(KEY) as endpoint:
        before = time.monotonic()
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(endpoint.url, "mine", SecretStr(KEY))],
        )
        assert made.status in (AskStatus.PENDING, AskStatus.STARTED)
        assert made.samples_cap == 20
        done = wait_until_done(ctx, made.id, alice)
    assert done.status is AskStatus.SUCCESS, done.error
    assert (done.progress_done, done.progress_total) == (20, 20)
    assert done.started_at is not None and done.finished_at is not None
    assert [(e.url, e.model) for e in done.plan.endpoints] == [(endpoint.url, "mine")]
    assert done.plan_id == done.plan.public().id
    # every request carried the key, and only the 20 items were asked
    assert all(ok for _, ok in endpoint.seen)
    assert endpoint.chat_calls() == 20
    # at the default pace: request i is sent no sooner than i intervals of 1/rps after
    # the first, which is sent after `before`, and arrives no sooner than it is sent.
    # (The span from the first arrival is no bound: on a busy machine the first request
    # can arrive late and the next on time; CI once saw 3.49 s for 19 intervals.)
    late = [
        (i, round(t - before, 3))
        for i, t in enumerate(endpoint.chat_times)
        if t - before < i / DEFAULT_RPS
    ]
    assert late == [], "requests sent ahead of the pace"
    [row] = asks.live_rows(ctx, made.id, alice)
    assert (row.status, row.n_samples, row.benchmarks) == (AskStatus.SUCCESS, 20, {"sums": 20})
    assert row.score == pytest.approx(1 / 20)
    assert (row.ci_low, row.ci_high) == pytest.approx(score_interval(1, 20))
    assert row.note == "one evaluation, not cross-checked"
    # another account (or nobody) is told it does not exist
    for viewer in (bob, None):
        with pytest.raises(NotFoundError):
            asks.view(ctx, made.id, viewer)
    # the key is nowhere: the database, the data directory, the logs
    stop_pool(ctx)
    ctx.db.dispose()
    assert_key_nowhere(ctx, caplog.text)
    # the public plan is stored without the endpoint; nothing reached the board or log
    with ctx.db.read() as session:
        stored = session.get(StoredPlan, done.plan_id)
        assert stored is not None and stored.plan["endpoints"] == []
        for table in (LeaderboardEntry, LeaderboardAggregate, Model, Task):
            assert session.scalars(select(table)).all() == [], table
        assert all("mine" not in repr(e.entry) for e in session.scalars(select(LogEntry)))


def assert_key_nowhere(ctx, logs: str, key: str = KEY) -> None:
    """The KEY GREP: every file under the data directory, a dump of every table, logs."""
    found = []
    for path in ctx.settings.data_dir.rglob("*"):
        if path.is_file() and key.encode() in path.read_bytes():
            found.append(str(path))
    with ctx.db.read_connection() as conn:
        tables = [
            t
            for (t,) in conn.execute(
                text("SELECT name FROM sqlite_master WHERE type='table'")
                if ctx.db.dialect == "sqlite"
                else text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            )
        ]
        for table in tables:
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                if key in repr(tuple(row)):
                    found.append(f"table {table}")
    assert key not in logs
    assert not found, found


def test_a_refused_key_fails_the_ask_in_plain_words(live_ctx, caplog):
    ctx = live_ctx
    alice, _ = accounts_of(ctx)
    caplog.set_level(logging.DEBUG)
    with serve_endpoint("the-right-key") as endpoint:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(endpoint.url, "mine", SecretStr(KEY))],
        )
        done = wait_until_done(ctx, made.id, alice)
    assert done.status is AskStatus.FAILURE
    assert "401" in (done.error or "") and KEY not in (done.error or "")
    [row] = asks.live_rows(ctx, made.id, alice)
    assert row.status is AskStatus.FAILURE and row.n_samples == 0
    stop_pool(ctx)
    assert_key_nowhere(ctx, caplog.text)


def test_a_restart_mid_ask_fails_it_with_the_message(make_ctx, sums_spec, db_url, caplog):
    ctx = make_ctx(db_url, benchmarks=[sums_spec], **LIVE)
    alice, _ = accounts_of(ctx)
    gate = threading.Event()
    with serve_endpoint(KEY, gate=gate) as endpoint:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(endpoint.url, "mine", SecretStr(KEY))],
        )
        deadline = time.monotonic() + 60
        while asks.view(ctx, made.id, alice).status is not AskStatus.STARTED:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # the server restarts (a second process on the same database) while it runs
        again = make_ctx(db_url, benchmarks=[sums_spec], **LIVE)
        failed = asks.view(again, made.id, alice)
        assert failed.status is AskStatus.FAILURE
        assert failed.error == KEY_NOT_KEPT
        gate.set()  # the first process's job goes on, and must not overwrite it
        stop_pool(ctx)
    assert asks.view(again, made.id, alice).error == KEY_NOT_KEPT


def test_a_graceful_stop_fails_the_asks_still_waiting(make_ctx, sums_spec, db_url):
    ctx = make_ctx(db_url, benchmarks=[sums_spec], ask_allow_private_endpoints=True, ask_workers=1)
    alice, _ = accounts_of(ctx)
    gate = threading.Event()
    with serve_endpoint(KEY, gate=gate) as endpoint:
        mine = [EndpointRequest(endpoint.url, "mine", SecretStr(KEY))]
        first = asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
        second = asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
        stopping = threading.Thread(target=stop_pool, args=(ctx,))
        stopping.start()
        time.sleep(0.3)
        gate.set()
        stopping.join(timeout=30)
    waiting = asks.view(ctx, second.id, alice)
    assert waiting.status is AskStatus.FAILURE and KEY_NOT_KEPT in (waiting.error or "")
    assert asks.view(ctx, first.id, alice).status is AskStatus.FAILURE


def test_endpoints_need_an_account_and_are_capped(make_ctx, sums_spec, db_url):
    ctx = make_ctx(
        db_url,
        benchmarks=[sums_spec],
        ask_allow_private_endpoints=True,
        ask_per_account=1,
        ask_max_samples=5,
    )
    alice, bob = accounts_of(ctx)
    gate = threading.Event()
    with serve_endpoint(KEY, gate=gate) as endpoint:
        mine = [EndpointRequest(endpoint.url, "mine", SecretStr(KEY))]
        with pytest.raises(AuthenticationError, match="signed-in account"):
            asks.create(ctx, owner_id=None, plan=PLAN, endpoints=mine)
        made = asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
        assert made.samples_cap == 5  # the plan's budget (20), capped by the setting
        with pytest.raises(RateLimitedError, match="QB_ASK_PER_ACCOUNT is 1") as refused:
            asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
        assert refused.value.retry_after and refused.value.retry_after > 3600
        # a cache-only ask is not counted, and needs no account
        assert asks.create(ctx, owner_id=None, plan=PLAN).status is AskStatus.SUCCESS
        gate.set()
        done = wait_until_done(ctx, made.id, alice)
    assert done.progress_total == 5
    [row] = asks.live_rows(ctx, made.id, alice)
    assert row.n_samples == 5
    with pytest.raises(InvalidPlanError, match="no query, fragment or credentials"):
        asks.create(
            ctx,
            owner_id=bob,
            plan=PLAN,
            endpoints=[EndpointRequest("https://example.com/v1?key=x", "m")],
        )
    with pytest.raises(InvalidPlanError, match="at most 3 endpoints"):
        asks.create(
            ctx,
            owner_id=bob,
            plan=PLAN,
            endpoints=[EndpointRequest(f"https://e{i}.example.com/v1", "m") for i in range(4)],
        )


def test_a_full_pool_refuses_more(make_ctx, sums_spec, db_url):
    ctx = make_ctx(
        db_url,
        benchmarks=[sums_spec],
        ask_allow_private_endpoints=True,
        ask_workers=1,
        ask_max_queued=1,
    )
    alice, bob = accounts_of(ctx)
    gate = threading.Event()
    with serve_endpoint(KEY, gate=gate) as endpoint:
        mine = [EndpointRequest(endpoint.url, "mine", SecretStr(KEY))]
        asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
        with pytest.raises(ServiceUnavailableError, match="under way"):
            asks.create(ctx, owner_id=bob, plan=PLAN, endpoints=mine)
        gate.set()
        stop_pool(ctx)
    with ctx.db.read() as session:
        assert len(session.scalars(select(Ask)).all()) == 1  # nothing stored for the refusal


def test_a_cache_only_ask_stores_its_public_plan_once(ctx):
    first = asks.create(ctx, owner_id=None, plan=PLAN)
    second = asks.create(ctx, owner_id=None, plan=PLAN)
    assert first.status is AskStatus.SUCCESS and first.finished_at is not None
    assert first.id != second.id and first.plan_id == second.plan_id
    assert asks.view(ctx, first.id, None).plan == first.plan  # anyone may read it
    with ctx.db.read() as session:
        assert len(session.scalars(select(StoredPlan)).all()) == 1
    with pytest.raises(InvalidPlanError, match="budget must be"):
        asks.create(ctx, owner_id=None, plan={**PLAN, "budget": 0})
    with pytest.raises(InvalidPlanError, match="needs a query or a plan"):
        asks.create(ctx, owner_id=None)
    with pytest.raises(NotFoundError):
        asks.view(ctx, "nope", None)


def test_a_loopback_endpoint_is_not_called_unless_the_operator_allows_it(
    make_ctx, sums_spec, db_url
):
    ctx = make_ctx(db_url, benchmarks=[sums_spec])  # QB_ASK_ALLOW_PRIVATE_ENDPOINTS off
    alice, _ = accounts_of(ctx)
    with serve_endpoint(KEY) as endpoint:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(endpoint.url, "mine", SecretStr(KEY))],
        )
        done = wait_until_done(ctx, made.id, alice)
    assert done.status is AskStatus.FAILURE and done.error
    assert "a loopback address" in done.error and KEY not in done.error
    assert endpoint.seen == []  # refused before any connection


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.1/v1", "private"),
        ("http://169.254.169.254/latest", "cloud metadata"),
        ("http://[::1]:9/v1", "loopback"),
        ("http://localhost:9/v1", "loopback"),
    ],
)
def test_endpoints_on_private_addresses_are_refused(make_ctx, sums_spec, url, why):
    ctx = make_ctx(benchmarks=[sums_spec])
    alice, _ = accounts_of(ctx)
    made = asks.create(
        ctx, owner_id=alice, plan=PLAN, endpoints=[EndpointRequest(url, "m", SecretStr(KEY))]
    )
    done = wait_until_done(ctx, made.id, alice)
    assert done.status is AskStatus.FAILURE
    assert why in (done.error or "") and KEY not in (done.error or "")


def test_the_board_puts_verified_rows_beside_the_endpoint_and_the_cache_keeps_none(
    make_ctx, clock, sums_spec, db_url
):
    from quorumbench.db.label_models import LabelAggregate, LabelCachedTask

    from .test_leaderboard_aggregate import Scene

    ctx = make_ctx(db_url, benchmarks=[sums_spec], **LIVE)
    scene = Scene(ctx, clock)
    beta = scene.model("beta")
    scene.finalize(beta, "sums", [1.0, 1.0, 0.0, 1.0])  # verified: 3 of s0..s3

    def cache() -> list[tuple]:
        with ctx.db.read() as session:
            return [
                tuple(getattr(row, c.key) for c in table.__table__.columns)
                for table in (LabelAggregate, LabelCachedTask)
                for row in session.scalars(select(table))
            ]

    before = cache()
    assert before  # the verified task is in the cache
    alice, _ = accounts_of(ctx)
    with serve_endpoint(KEY) as endpoint:
        made = asks.create(
            ctx,
            owner_id=alice,
            plan=PLAN,
            endpoints=[EndpointRequest(endpoint.url, "beta", SecretStr(KEY))],  # a public name
        )
        assert wait_until_done(ctx, made.id, alice).status is AskStatus.SUCCESS
    found = asks.board(ctx, made.id, alice)
    [verified] = found.cache.rows
    assert (verified.model_id, verified.n_samples, verified.score) == (beta, 4, 0.75)
    assert verified.thin  # 4 samples, the plan's budget is 20
    [mine] = found.endpoints
    assert (mine.model, mine.n_samples, mine.score) == ("beta", 20, pytest.approx(0.05))
    # the endpoint's result changed nothing shared: the cache, the public plan's board
    assert cache() == before
    plan, shared = asks.plan_board(ctx, made.plan_id)
    assert plan.endpoints == () and shared.rows == found.cache.rows


def test_concurrent_asks_cannot_pass_the_per_account_cap_together(make_ctx, sums_spec, db_url):
    ctx = make_ctx(db_url, benchmarks=[sums_spec], **LIVE, ask_per_account=1)
    alice, _ = accounts_of(ctx)
    outcomes: list[str] = []
    gate = threading.Event()
    with serve_endpoint(KEY, gate=gate) as endpoint:
        mine = [EndpointRequest(endpoint.url, "mine", SecretStr(KEY))]
        start = threading.Barrier(4)

        def ask() -> None:
            start.wait()
            try:
                asks.create(ctx, owner_id=alice, plan=PLAN, endpoints=mine)
                outcomes.append("made")
            except RateLimitedError:
                outcomes.append("refused")

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        gate.set()
        stop_pool(ctx)
    assert sorted(outcomes) == ["made", "refused", "refused", "refused"]
