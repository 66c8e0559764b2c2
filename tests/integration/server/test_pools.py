"""A whole prize pool on a real server with a fake clock, on SQLite and PostgreSQL:
fund, join, daily snapshots, end, settle exactly once, verify from outside."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from rich.console import Console
from sqlalchemy import func, select

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.allocation import allocate, parse_rule
from quorumbench.core.payouts import check_payouts
from quorumbench.db.models import Epoch, LogEntry, Task
from quorumbench.db.pool_models import LedgerEntry, PoolPayout, PoolSnapshot
from quorumbench.errors import (
    ConflictError,
    InsufficientFundsError,
    PermissionDeniedError,
)
from quorumbench.services import ledger, pools, publiclog
from quorumbench.services.pool_ticks import pool_tick, settle
from quorumbench.services.scheduler import ensure_epoch, tick

from .conftest import hub_ref
from .pool_world import DAY1, World, spec


@pytest.fixture
def world(make_ctx, sums_spec, db_url):
    made = World(make_ctx, sums_spec, db_url)
    yield made
    made.close()


def _snapshots(ctx, pool_id):
    with ctx.db.read() as session:
        return list(
            session.scalars(
                select(PoolSnapshot)
                .where(PoolSnapshot.pool_id == pool_id)
                .order_by(PoolSnapshot.period)
            )
        )


def test_a_whole_pool_from_funding_to_verified_payouts(
    make_ctx, sums_spec, db_url, clock, tmp_path
):
    world = World(make_ctx, sums_spec, db_url, pool_finalize_grace_s=3600)  # the default
    try:
        _whole_pool(world, clock, tmp_path)
    finally:
        world.close()


def _whole_pool(world, clock, tmp_path):
    ctx = world.ctx
    world.mint("funder", 1500)
    one = world.register(hub_ref(1), "ana")
    two = world.register(hub_ref(2), "ben")
    three = world.register(hub_ref(3), "ana")
    score_of = {one: 1.0, two: 0.5, three: 0.25}
    world.run_all(score_of)  # the registration epoch's tasks: before the pool's epochs

    made = pools.create_pool(ctx, world.who("funder"), spec())
    assert made.phase == "upcoming" or made.phase == "open"
    assert world.balance("funder") == 500 and world.escrow(made.id) == 1000
    for model in (one, three):
        pools.join_pool(ctx, world.who("ana"), made.id, str(model))
    pools.join_pool(ctx, world.who("ben"), made.id, hub_ref(2))  # by ref

    for day in range(3):
        clock.now = DAY1 + timedelta(days=day, seconds=5)
        tick(ctx)  # the day's epoch tasks, then the pool's snapshot of this boundary
        world.run_all(score_of)
        tick(ctx)
        tick(ctx)  # ticking again stores nothing twice
        assert [s.period for s in _snapshots(ctx, made.id)] == list(range(day + 1)), day
    detail = pools.get_pool(ctx, made.id)
    assert detail.pool.phase == "running" and detail.pool.n_entries == 3
    # each entry: three epochs, the base draw (4 samples) of each, whatever the depth
    assert [(r.entry.model_id, r.standing.n_samples) for r in detail.board] == [
        (one, 12),
        (two, 12),
        (three, 12),
    ]
    assert [r.standing.score for r in detail.board] == [1.0, 0.5, 0.25]
    assert [r.rank for r in detail.board] == [1, 2, 3]
    assert [p.amount for p in detail.payouts] == [500, 333, 167]  # the preview
    # the first snapshots (before any pool epoch ended) are empty boards
    assert _snapshots(ctx, made.id)[0].standing == []

    with pytest.raises(ConflictError, match="closed"):
        pools.join_pool(ctx, world.who("ben"), made.id, hub_ref(1))

    clock.now = DAY1 + timedelta(days=3, seconds=5)
    # the end: snapshot of period 3; the standing waits for the finalize grace (an hour)
    assert tick(ctx).pools == 1
    assert pools.get_pool(ctx, made.id).pool.status == "active"
    clock.now = DAY1 + timedelta(days=3, hours=2)  # a late tick: the same standing
    report = tick(ctx)  # standing frozen as of end + grace, settled (no window)
    assert report.pools == 2
    detail = pools.get_pool(ctx, made.id)
    assert detail.pool.status == "settled" and detail.pool.phase == "settled"
    assert [s.period for s in _snapshots(ctx, made.id)] == [0, 1, 2, 3]
    expected = allocate(
        1000, [r.standing for r in detail.board], parse_rule("ArithmeticDecrease"), "exact"
    )
    assert [p.amount for p in detail.payouts] == [p.amount for p in expected] == [500, 333, 167]
    assert world.balance("ana") == 667 and world.balance("ben") == 333
    assert world.escrow(made.id) == 0 and world.balance("funder") == 500
    assert ledger.check_ledger(ctx) == []
    record = detail.payout_record
    assert record is not None and record["payout"]["funds"] == 1000
    assert record["payout"]["standing_at"] == (DAY1 + timedelta(days=3, hours=1)).isoformat()
    assert [a["amount"] for a in record["payout"]["amounts"]] == [500, 333, 167]

    # the record is in the public log, and recomputes
    rows = publiclog.entries(ctx, 0, 1000)
    logged = [r for r in rows if "payout" in r["entry"]]
    assert len(logged) == 1 and logged[0]["index"] == record["log_index"]
    assert check_payouts(rows) == []

    # a second settlement does nothing
    before = world.counts()
    assert settle(ctx, made.id) == 0
    tick(ctx)
    assert world.counts() == before and world.balance("ana") == 667
    with pytest.raises(ConflictError):
        pools.cancel_pool(ctx, world.who("admin"), made.id, "too late")

    # `quorumbench verify` from outside: the log, the board and the payout
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as server:
        report = verify(server.url, tmp_path / "verify-state.json", Console())
    assert report.problems == [] and report.payouts_checked == 1


def _ended_pool(world, clock, window_s=60):
    """A pool of two entries whose final standing is frozen, its settlement waiting for
    the dispute window; (pool id, the models)."""
    ctx = world.ctx
    world.mint("funder", 1000)
    one = world.register(hub_ref(11), "ana")
    two = world.register(hub_ref(12), "ben")
    made = pools.create_pool(
        ctx,
        world.who("funder"),
        spec(rule="WinnerTakesAll", ends_at=DAY1 + timedelta(days=1), join_deadline=DAY1),
    )
    pools.join_pool(ctx, world.who("ana"), made.id, str(one))
    pools.join_pool(ctx, world.who("ben"), made.id, str(two))
    clock.now = DAY1 + timedelta(seconds=5)
    tick(ctx)
    world.run_all({one: 0.75, two: 0.5})
    clock.now = DAY1 + timedelta(days=1, seconds=5)
    tick(ctx)
    detail = pools.get_pool(ctx, made.id)
    assert detail.pool.phase == "ended" and detail.payout_record is None
    assert [r.entry.model_id for r in detail.board] == [one, two]
    clock.advance(window_s)
    return made.id


@pytest.mark.parametrize("replicas", [2])
def test_two_replicas_settling_at_once_pay_once(make_ctx, sums_spec, db_url, clock, replicas):
    world = World(make_ctx, sums_spec, db_url, pool_dispute_window_s=60)
    try:
        pool_id = _ended_pool(world, clock)
        contexts = [world.ctx] + [
            make_ctx(db_url, benchmarks=[sums_spec], samples_per_task=4, epoch_seconds=86_400)
            for _ in range(replicas - 1)
        ]
        start = threading.Barrier(len(contexts))
        settled: list[int] = []

        def run(ctx):
            start.wait()
            settled.append(settle(ctx, pool_id))

        threads = [threading.Thread(target=run, args=(c,)) for c in contexts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(settled) == [0] * (replicas - 1) + [1]
        assert world.balance("ana") == 1000 and world.balance("ben") == 0
        assert world.escrow(pool_id) == 0 and ledger.check_ledger(world.ctx) == []
        with world.ctx.db.read() as session:
            assert session.scalar(select(func.count()).select_from(PoolPayout)) == 1
            assert (
                session.scalar(
                    select(func.count())
                    .select_from(LedgerEntry)
                    .where(LedgerEntry.reason == "payout")
                )
                == 2
            )  # one transfer, two lines
            assert (
                session.scalar(
                    select(func.count()).select_from(LogEntry).where(LogEntry.task_id.is_(None))
                )
                == 1
            )
    finally:
        world.close()


def test_the_dispute_window_delays_settlement_and_cancelling_refunds(
    make_ctx, sums_spec, db_url, clock
):
    world = World(make_ctx, sums_spec, db_url, pool_dispute_window_s=3600)
    try:
        pool_id = _ended_pool(world, clock, window_s=60)
        tick(world.ctx)  # within the window: nothing paid
        assert pools.get_pool(world.ctx, pool_id).pool.status == "active"
        assert world.escrow(pool_id) == 1000
        with pytest.raises(Exception, match="admin"):
            pools.cancel_pool(world.ctx, world.who("funder"), pool_id, "mine")
        view = pools.cancel_pool(world.ctx, world.who("admin"), pool_id, "a disputed result")
        assert view.status == "cancelled" and view.cancel_reason == "a disputed result"
        assert world.escrow(pool_id) == 0 and world.balance("funder") == 1000
        assert world.balance("ana") == 0 and ledger.check_ledger(world.ctx) == []
        clock.advance(7200)
        tick(world.ctx)  # a cancelled pool never settles
        assert settle(world.ctx, pool_id) == 0
        assert world.balance("funder") == 1000
        assert pools.get_pool(world.ctx, pool_id).payouts == []
        with pytest.raises(ConflictError):
            pools.cancel_pool(world.ctx, world.who("admin"), pool_id, "twice")
    finally:
        world.close()


def test_concurrent_funding_cannot_overspend(make_ctx, sums_spec, db_url):
    world = World(make_ctx, sums_spec, db_url)
    try:
        world.mint("funder", 1000)
        start = threading.Barrier(2)
        outcomes: list[object] = []

        def fund():
            start.wait()
            try:
                outcomes.append(pools.create_pool(world.ctx, world.who("funder"), spec(funds=600)))
            except InsufficientFundsError as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=fund) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(type(o).__name__ for o in outcomes) == ["InsufficientFundsError", "PoolView"]
        assert len(pools.list_pools(world.ctx)) == 1 and world.balance("funder") == 400
    finally:
        world.close()


def test_late_joiners_get_fewer_epochs_on_the_same_items_and_an_unrevealed_split_is_logged(
    make_ctx, sums_spec, db_url, clock
):
    # tiers of 4 and 8 samples: equal models overlap and get 8-sample tasks once they
    # have 8 samples; the pool counts each epoch's base draw (4) only
    world = World(
        make_ctx,
        sums_spec,
        db_url,
        depth_tiers=[8],
        pool_dispute_window_s=3600,
        pool_reveal_window_s=0,
    )
    try:
        ctx = world.ctx
        world.mint("funder", 1000)
        one = world.register(hub_ref(31), "ana")
        two = world.register(hub_ref(32), "ben")
        scores = {one: 0.5, two: 0.5}
        world.run_all(scores)
        held_out = "c" * 64
        made = pools.create_pool(ctx, world.who("funder"), spec(final_sha256=held_out))
        pools.join_pool(ctx, world.who("ana"), made.id, str(one))
        for day in range(3):
            clock.now = DAY1 + timedelta(days=day, seconds=5)
            tick(ctx)
            world.run_all(scores)
            if day == 0:  # ben joins during the first epoch: it counts from the next one
                clock.now = DAY1 + timedelta(hours=12)
                pools.join_pool(ctx, world.who("ben"), made.id, str(two))
        with ctx.db.read() as session:
            depths = set(
                session.scalars(
                    select(Task.n_samples)
                    .join(Epoch, Epoch.id == Task.epoch_id)
                    .where(Epoch.starts_at == DAY1 + timedelta(days=2))
                )
            )
        assert depths == {8}  # deeper tasks that day, yet 4 samples each count
        board = pools.get_pool(ctx, made.id).board
        assert {r.entry.model_id: r.standing.n_samples for r in board} == {one: 12, two: 8}
        assert [r.standing.score for r in board] == [0.5, 0.5]
        assert [r.rank for r in board] == [1, 1]  # tied: neither is ahead
        assert [p.amount for p in pools.get_pool(ctx, made.id).payouts] == [500, 500]

        final = {"format": "exact-match", "data": {"url": "https://example.org/final.jsonl"}}
        with pytest.raises(ConflictError, match="at the end"):
            pools.reveal_final(ctx, world.who("funder"), made.id, final)
        clock.now = made.ends_at + timedelta(seconds=5)
        tick(ctx)  # no reveal window here: ended on the pool board, settlement waits an hour
        assert pools.get_pool(ctx, made.id).final.state == "not_revealed"
        with pytest.raises(PermissionDeniedError):
            pools.reveal_final(ctx, world.who("ben"), made.id, final)
        with pytest.raises(ConflictError, match="had to be revealed by"):
            pools.reveal_final(ctx, world.who("funder"), made.id, final)
        clock.advance(3600)
        tick(ctx)
        record = pools.get_pool(ctx, made.id).payout_record
        assert record is not None
        deadline = made.ends_at.isoformat()
        assert record["payout"]["final_split"] == {
            "sha256": held_out,
            "url": None,
            "used": False,
            "why": f"not revealed by its deadline ({deadline})",
        }
        assert world.balance("ana") == world.balance("ben") == 500
    finally:
        world.close()


def test_two_replicas_ticking_at_once_store_each_snapshot_once(make_ctx, sums_spec, db_url, clock):
    world = World(make_ctx, sums_spec, db_url)
    try:
        world.mint("funder", 100)
        made = pools.create_pool(world.ctx, world.who("funder"), spec(funds=100))
        other = make_ctx(db_url, benchmarks=[sums_spec], samples_per_task=4, epoch_seconds=86_400)
        clock.now = DAY1 + timedelta(days=2)  # periods 0, 1 and 2 due (from 12:00:05)
        start = threading.Barrier(2)
        reports = []

        def run(ctx):
            start.wait()
            reports.append(pool_tick(ctx, ensure_epoch(ctx, ctx.now()).id))

        threads = [threading.Thread(target=run, args=(c,)) for c in (world.ctx, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sum(r.snapshots for r in reports) == 3
        assert sum(r.joins_closed for r in reports) == 1
        assert [s.period for s in _snapshots(world.ctx, made.id)] == [0, 1, 2]
    finally:
        world.close()
