"""Epochs and task creation: idempotent, replica-safe, within budget."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from quorumbench.db.models import Benchmark, Epoch, Task
from quorumbench.services.accounts import Principal, create_account
from quorumbench.services.models import register_model
from quorumbench.services.scheduler import ensure_epoch, epoch_start, schedule_epoch, tick

from .conftest import fake_metadata, hub_ref


def _models(ctx, count):
    owner = create_account(ctx, "owner", is_admin=True)
    principal = Principal(owner.id, "owner", True, frozenset({"admin"}))
    return [
        register_model(ctx, principal, hub_ref(i), inspector=fake_metadata).id for i in range(count)
    ]


def _count(ctx, **where):
    with ctx.db.read() as session:
        query = select(func.count()).select_from(Task)
        for key, value in where.items():
            query = query.where(getattr(Task, key) == value)
        return session.scalar(query)


def test_tick_is_idempotent(ctx):
    _models(ctx, 3)
    first = tick(ctx)
    assert first.created == 3
    assert tick(ctx).created == 0
    epoch = ensure_epoch(ctx, ctx.now())
    assert schedule_epoch(ctx, epoch) == 0
    assert _count(ctx) == 3


def test_replicas_scheduling_at_once_create_each_task_once(make_ctx, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = make_ctx(url), make_ctx(url)
    _models(a, 5)
    barrier = threading.Barrier(2)

    def run(ctx):
        barrier.wait()
        epoch = ensure_epoch(ctx, ctx.now())
        schedule_epoch(ctx, epoch)

    threads = [threading.Thread(target=run, args=(c,)) for c in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _count(a) == 5
    with a.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Epoch)) == 1


def test_budget_caps_an_epoch(make_ctx, tmp_path):
    ctx = make_ctx(f"sqlite:///{tmp_path / 'budget.db'}", epoch_task_budget=2)
    _models(ctx, 5)
    tick(ctx)
    assert _count(ctx) == 2


def test_every_epoch_gets_its_own_tasks_and_seed(ctx, clock):
    _models(ctx, 2)
    tick(ctx)
    first = ensure_epoch(ctx, ctx.now())
    clock.advance(ctx.settings.epoch_seconds)
    tick(ctx)
    second = ensure_epoch(ctx, ctx.now())
    assert second.id == first.id + 1
    assert second.seed != first.seed
    assert _count(ctx, epoch_id=second.id) == 2
    with ctx.db.read() as session:
        ids = {tuple(t.sample_ids) for t in session.scalars(select(Task))}
    assert len(ids) == 2  # same samples for every model within an epoch, new ones next epoch


def test_a_held_epoch_gets_no_tasks_of_the_hour_that_turns_meanwhile(ctx, clock):
    """``quorumbench demo`` holds its tasks' epoch while its runners work: when the hour
    turns meanwhile, nothing of the next epoch is scheduled for its tasks to wait behind
    (issue 29); leases still expire on the real clock. Once released, the next epoch's
    tasks come."""
    _models(ctx, 2)
    clock.now = datetime(2026, 11, 22, 12, 59, 58, tzinfo=UTC)
    first = tick(ctx)
    assert _count(ctx, epoch_id=first.epoch) == 2
    ctx.scheduling_at = epoch_start(ctx, first.epoch)
    clock.advance(10)  # 13:00:08: the hour turned
    assert ensure_epoch(ctx, ctx.now()).id == first.epoch + 1
    held = tick(ctx)
    assert held.epoch == first.epoch and held.created == 0
    assert _count(ctx, epoch_id=first.epoch + 1) == 0 and _count(ctx) == 2
    ctx.scheduling_at = None
    released = tick(ctx)
    assert released.epoch == first.epoch + 1 and _count(ctx, epoch_id=released.epoch) == 2


def test_a_custom_benchmark_configured_by_its_spec_path_is_scheduled(make_ctx):
    spec = Path(__file__).resolve().parents[2] / "fixtures" / "custom" / "sums.yaml"
    ctx = make_ctx(benchmarks=["arith", str(spec)])
    _models(ctx, 2)
    assert tick(ctx).created == 4  # 2 models x (arith, small-sums)
    with ctx.db.read() as session:
        names = session.scalars(
            select(Benchmark.name).join(Task, Task.benchmark_id == Benchmark.id).distinct()
        ).all()
    assert sorted(names) == ["arith", "small-sums"]


def test_a_model_registered_after_the_epoch_was_scheduled_gets_its_tasks_next_tick(
    make_ctx, db_url
):
    ctx = make_ctx(db_url)
    owner = create_account(ctx, "owner", is_admin=True)
    admin = Principal(owner.id, "owner", True, frozenset({"admin"}))
    register_model(ctx, admin, hub_ref(1), inspector=fake_metadata)
    assert tick(ctx).created == 1
    late = register_model(ctx, admin, hub_ref(2), inspector=fake_metadata)  # no scheduling
    assert _count(ctx, model_id=late.id) == 0
    assert tick(ctx).created == 1  # this tick, not the next epoch's
    assert _count(ctx, model_id=late.id) == 1
    assert tick(ctx).created == 0


def test_a_benchmark_added_at_a_restart_is_scheduled_in_the_current_epoch(make_ctx, tmp_path):
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    ctx = make_ctx(url)
    _models(ctx, 2)
    assert tick(ctx).created == 2
    spec = Path(__file__).resolve().parents[2] / "fixtures" / "custom" / "sums.yaml"
    restarted = make_ctx(url, benchmarks=["arith", str(spec)])
    assert tick(restarted).created == 2  # each model on small-sums, same epoch
    assert tick(restarted).created == 0


def test_models_on_inactive_benchmarks_get_tasks_once_the_benchmark_is_back(make_ctx, tmp_path):
    url = f"sqlite:///{tmp_path / 'inactive.db'}"
    ctx = make_ctx(url, benchmarks=[])
    _models(ctx, 2)
    assert tick(ctx).created == 0  # no active benchmark: nothing to schedule
    back = make_ctx(url)  # arith active again
    assert tick(back).created == 2


def test_paused_models_get_no_tasks_until_resumed(ctx):
    ids = _models(ctx, 3)
    with ctx.db.write() as session:
        from quorumbench.db.models import Model

        session.get_one(Model, ids[0]).paused_at = ctx.now()
    assert tick(ctx).created == 2
    assert _count(ctx, model_id=ids[0]) == 0
    with ctx.db.write() as session:
        from quorumbench.db.models import Model

        session.get_one(Model, ids[0]).paused_at = None
    assert tick(ctx).created == 1


def test_a_full_epoch_is_not_planned_again_on_every_tick(ctx, monkeypatch):
    _models(ctx, 2)
    tick(ctx)
    import quorumbench.services.scheduler as scheduler

    def boom(*_args):
        raise AssertionError("nothing is missing: the epoch must not be planned again")

    monkeypatch.setattr(scheduler, "schedule_epoch", boom)
    assert tick(ctx).created == 0


def test_a_spent_budget_stops_the_gap_filling(make_ctx, tmp_path):
    ctx = make_ctx(f"sqlite:///{tmp_path / 'spent.db'}", epoch_task_budget=2)
    _models(ctx, 5)
    assert tick(ctx).created == 2
    assert tick(ctx).created == 0
    assert _count(ctx) == 2


def _board(ctx, rows):
    """Leaderboard rows on arith: (model id, n_samples, score, half width)."""
    from quorumbench.db.models import LeaderboardEntry

    with ctx.db.write() as session:
        bench = session.scalars(select(Benchmark).where(Benchmark.name == "arith")).one()
        for model_id, n, score, half in rows:
            session.add(
                LeaderboardEntry(
                    model_id=model_id,
                    benchmark_id=bench.id,
                    n_tasks=max(1, n // 4),
                    n_samples=n,
                    weighted_sum=score * n,
                    sample_sum=score * n,
                    sample_sumsq=score * n,
                    score=score,
                    stderr=half / 2,
                    ci_low=score - half,
                    ci_high=score + half,
                    updated_at=ctx.now(),
                )
            )
        return bench.id


def _tasks(ctx):
    with ctx.db.read() as session:
        return {t.model_id: t for t in session.scalars(select(Task))}


def test_contested_models_with_evidence_get_deeper_tasks(make_ctx, tmp_path):
    ctx = make_ctx(f"sqlite:///{tmp_path / 'depth.db'}", depth_top_k=1)
    a, b, c, d, new = _models(ctx, 5)
    _board(
        ctx,
        [
            (a, 120, 0.90, 0.03),  # top, overlaps b: the top tier, evidence for 100
            (b, 40, 0.86, 0.03),  # overlaps a across the top-1 line: tier 1, 25
            (c, 8, 0.60, 0.03),  # settled, little evidence: shallow
            (d, 200, 0.20, 0.02),  # settled at the bottom: shallow
        ],
    )
    assert tick(ctx).created == 5
    depth = {m: t.n_samples for m, t in _tasks(ctx).items()}
    assert depth == {a: 100, b: 25, c: 4, d: 4, new: 4}
    ids = {m: t.sample_ids for m, t in _tasks(ctx).items()}
    # one draw per epoch: a deeper task's samples extend the shallow ones
    assert ids[a][:25] == ids[b] and ids[b][:4] == ids[c] == ids[new]
    # the model page says what the scheduler did, and why
    from quorumbench.services.scheduler import model_depths

    shown = {m: model_depths(ctx, m)["arith"] for m in (a, b, c, d, new)}
    assert {m: x.samples for m, x in shown.items()} == depth
    assert [shown[m].tier for m in (a, b, c, d, new)] == [2, 1, 0, 0, 0]
    assert "within the top 1" in shown[a].why and shown[new].why == "not measured yet"
    assert shown[c].tier_samples == 4 and shown[b].tier_samples == 25


def test_the_sample_budget_caps_an_epoch_and_a_fruitless_plan_is_not_repeated(
    make_ctx, tmp_path, monkeypatch
):
    ctx = make_ctx(f"sqlite:///{tmp_path / 'samples.db'}", epoch_sample_budget=110, depth_top_k=2)
    a, b, new = _models(ctx, 3)
    _board(ctx, [(a, 150, 0.9, 0.05), (b, 150, 0.88, 0.05)])  # both want 100
    assert tick(ctx).created == 2  # the new model (4), then one deep task (100)
    with ctx.db.read() as session:
        spent = session.scalar(select(func.sum(Task.n_samples)))
    assert spent == 104
    import quorumbench.services.scheduler as scheduler

    planned = []
    real = scheduler.schedule_epoch
    monkeypatch.setattr(
        scheduler, "schedule_epoch", lambda c, e: planned.append(e.id) or real(c, e)
    )
    assert tick(ctx).created == 0  # the other deep task does not fit the 6 left
    assert tick(ctx).created == 0
    assert len(planned) == 1  # planned once, then not again until something changes
    register_model(
        ctx,
        Principal(1, "owner", True, frozenset({"admin"})),
        hub_ref(99),
        inspector=fake_metadata,
    )
    assert tick(ctx).created == 1 and len(planned) == 2  # a new model: a 4-sample task


def test_depth_tiers_must_rise(tmp_path):
    import pytest

    from quorumbench.errors import ConfigError

    from .conftest import _settings

    with pytest.raises(ConfigError, match="must rise"):
        _settings("sqlite://", tmp_path, depth_tiers=[4, 50])
    with pytest.raises(ConfigError, match="must rise"):
        _settings("sqlite://", tmp_path, depth_tiers=[50, 25])


def test_tiers_never_ask_more_samples_than_a_benchmark_has(make_ctx):
    spec = Path(__file__).resolve().parents[2] / "fixtures" / "custom" / "sums.yaml"
    ctx = make_ctx(benchmarks=[str(spec)], samples_per_task=2, depth_top_k=1)
    from quorumbench.services.scheduler import tiers_for

    with ctx.db.read() as session:
        bench = session.scalars(select(Benchmark).where(Benchmark.active)).one()
    size = len(ctx.loaded_benchmarks[str(spec)].sample_ids())
    assert tiers_for(ctx, bench) == (2, size)  # 25 and 100 are both capped to its size
