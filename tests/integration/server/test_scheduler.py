"""Epochs and task creation: idempotent, replica-safe, within budget."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import func, select

from quorumbench.db.models import Benchmark, Epoch, Task
from quorumbench.services.accounts import Principal, create_account
from quorumbench.services.models import register_model
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch, tick

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
