"""A paused model's tasks are not claimable, on every queue backend, and resuming it
makes them claimable again (through the Redis stream too: its entries are dropped
while it is paused and published again on resume). A retired model's are never
claimable again. The claim keeps using the partial index ``ix_tasks_claimable``."""

from __future__ import annotations

from sqlalchemy import select, update

from quorumbench.db.models import Account, Model, Task
from quorumbench.queue.base import Claimant
from quorumbench.queue.redis_streams import RedisStreamTaskQueue
from quorumbench.queue.sql import _QUEUE_ORDER_PLAN, SqlTaskQueue
from quorumbench.services.accounts import DEFAULT_SCOPES, Principal
from quorumbench.services.failures import report_failure, resume_model
from quorumbench.services.models import retire_model

from .conftest import QUORUM, World


def _model_of(world: World, task_id: int) -> int:
    return world.task(task_id).model_id


def _pause(world: World, model_id: int) -> None:
    with world.db.write() as session:
        session.execute(
            update(Model)
            .where(Model.id == model_id)
            .values(paused_at=world.clock.now, paused_reason="test")
        )


def _owner(world: World, claimant: Claimant) -> Principal:
    with world.db.read() as session:
        name = session.get_one(Account, claimant.account_id).name
    return Principal(claimant.account_id, name, False, frozenset(DEFAULT_SCOPES))


def _stream_entries(world: World) -> int:
    queue = world.queue
    assert isinstance(queue, RedisStreamTaskQueue)
    return int(queue.redis.xlen(queue.stream))


def test_a_paused_models_tasks_are_not_claimable_until_it_is_resumed(world: World) -> None:
    owner, runner, other = world.account(), world.account(), world.account()
    paused_task, open_task = world.tasks(owner, count=2)
    model_id = _model_of(world, paused_task)
    _pause(world, model_id)

    claim = world.claim(runner)
    assert claim is not None and claim.task_id == open_task  # the paused one is skipped
    assert world.claim(runner) is None
    assert world.task(paused_task).open_slots == QUORUM  # nothing taken from it
    if isinstance(world.queue, RedisStreamTaskQueue):
        # its entries were met and dropped, not put back over and over
        assert world.queue.redis.hget(world.queue.counts, str(paused_task)) is None
        world.queue.republish_open()  # the scheduler's tick leaves it out too
        assert world.queue.redis.hget(world.queue.counts, str(paused_task)) is None

    resumed = resume_model(world.ctx, _owner(world, owner), model_id)
    assert resumed.changed and resumed.model.paused_at is None
    if isinstance(world.queue, RedisStreamTaskQueue):
        assert world.queue.redis.hget(world.queue.counts, str(paused_task)) == str(QUORUM)
        before = _stream_entries(world)
    claim = world.claim(runner)
    assert claim is not None and claim.task_id == paused_task
    if isinstance(world.queue, RedisStreamTaskQueue):
        assert _stream_entries(world) == before - 1  # found through the stream
    again = world.claim(other)
    assert again is not None and again.task_id in (paused_task, open_task)


def test_a_retired_models_tasks_are_never_claimable_again(world: World) -> None:
    owner, runner = world.account(), world.account()
    retired_task, open_task = world.tasks(owner, count=2)
    model_id = _model_of(world, retired_task)
    retired = retire_model(world.ctx, _owner(world, owner), model_id)
    assert retired.changed and retired.model.retired_at is not None
    claim = world.claim(runner)
    assert claim is not None and claim.task_id == open_task
    assert world.claim(runner) is None
    assert world.claim(world.account()) is not None  # the open one, for another account
    assert world.task(retired_task).open_slots == QUORUM  # nothing taken from it
    if isinstance(world.queue, RedisStreamTaskQueue):
        world.queue.republish_open()  # the scheduler's tick leaves it out
        assert world.queue.redis.hget(world.queue.counts, str(retired_task)) is None
    assert world.claim(world.account()) is not None  # still the open task's slots only
    assert world.task(retired_task).open_slots == QUORUM


def test_failure_reports_pause_a_model_and_its_task_stops_being_offered(world: World) -> None:
    owner = world.account()
    (task_id,) = world.tasks(owner)
    model_id = _model_of(world, task_id)
    # quorum 3: a task fails when two accounts report a failure; one failed task pauses
    world.ctx.settings = world.ctx.settings.model_copy(update={"pause_after_failed_tasks": 1})
    failing = [world.account(), world.account()]
    for claimant in failing:
        claim = world.claim(claimant)
        assert claim is not None and claim.task_id == task_id
        report_failure(world.ctx, claimant, claim.lease_id, claim.attempt, "does not load")
    with world.db.read() as session:
        model = session.get_one(Model, model_id)
        assert model.paused_at is not None
        assert model.paused_reason is not None and "does not load" in model.paused_reason
    assert world.task(task_id).open_slots == QUORUM
    assert world.claim(world.account()) is None


def test_the_claim_still_walks_the_claimable_index(world: World) -> None:
    queue = world.queue
    sql = queue.sql if isinstance(queue, RedisStreamTaskQueue) else queue
    assert isinstance(sql, SqlTaskQueue)
    owner = world.account()
    world.tasks(owner, count=3)
    with world.db.write_connection() as conn:
        compiled = sql._take_first.compile(dialect=conn.dialect)
        # the runner's engines are an expanding list, written into the statement here
        text = str(compiled).replace("__[POSTCOMPILE_engines]", "'transformers', 'llamacpp'")
        # raw parameters carry no SQL types: the runner's flags must be real booleans; the
        # statement's own literals keep their values, the account and ids are 1
        flags = ("edge_ok", "gguf_adapters_ok")
        params = {
            name: True if name in flags else (1 if value is None else value)
            for name, value in compiled.params.items()
            if name != "engines"
        }
        if world.db.dialect == "postgresql":
            conn.execute(_QUEUE_ORDER_PLAN)
            plan = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {text}", params))
        else:
            args = tuple(params[name] for name in compiled.positiontup or () if name != "engines")
            plan = "\n".join(
                str(row[3]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {text}", args)
            )
        conn.rollback()
    assert "ix_tasks_claimable" in plan, plan
    assert "paused_at IS NULL" in str(compiled) and "retired_at IS NULL" in str(compiled)
    with world.db.read() as session:  # nothing was taken
        assert set(session.scalars(select(Task.open_slots))) == {QUORUM}
