"""Pool pairs get their share of a tight epoch budget, richest pool first, and are
leased first (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from quorumbench.db.models import Epoch, Task
from quorumbench.services import pools
from quorumbench.services.scheduler import tick

from .conftest import hub_ref
from .pool_world import DAY1, World, spec


def _epoch_tasks(ctx, when):
    with ctx.db.read() as session:
        return session.execute(
            select(Task.model_id, Task.priority)
            .join(Epoch, Epoch.id == Task.epoch_id)
            .where(Epoch.starts_at == when, Task.purpose == "epoch")
            .order_by(Task.priority)
        ).all()


def test_a_tight_budget_serves_the_pools_entries_first(make_ctx, sums_spec, db_url, clock):
    # one task per model per epoch; a budget of 3 tasks for 6 models
    world = World(make_ctx, sums_spec, db_url, epoch_task_budget=3, pool_budget_share=0.5)
    try:
        ctx = world.ctx
        world.mint("funder", 3000)
        models = [world.register(hub_ref(80 + i), "ana" if i % 2 else "ben") for i in range(6)]
        rich = pools.create_pool(ctx, world.who("funder"), spec(funds=2000))
        poor = pools.create_pool(ctx, world.who("funder"), spec(funds=1000))
        last, second = models[-1], models[-2]  # ranked last by the plain plan (highest ids)
        pools.join_pool(ctx, world.who("ana"), rich.id, str(last))  # index 5: ana's
        pools.join_pool(ctx, world.who("ben"), poor.id, str(second))  # index 4: ben's
        clock.now = DAY1 + timedelta(seconds=5)
        tick(ctx)
        got = _epoch_tasks(ctx, DAY1)
        assert len(got) == 3
        # reserve: 1 task (3 × 0.5), to the richer pool; then the plain order
        assert got[0].model_id == last
        assert second not in [t.model_id for t in got]  # the poorer pool's share rounds to 0
        assert [t.model_id for t in got[1:]] == sorted(models)[:2]
    finally:
        world.close()
