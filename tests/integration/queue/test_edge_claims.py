"""An edge task (``tasks.purpose = 'edge'``, services/edge_tasks.py) is leased only to
a runner that runs them (``Claimant.edge``: it speaks protocol 1.2), on every queue
backend: another runner passes over it, and on Redis its stream entry stays for the
runners that can take it."""

from __future__ import annotations

import dataclasses

from sqlalchemy import update

from quorumbench.db.models import TASK_EDGE, Task
from quorumbench.queue.redis_streams import RedisStreamTaskQueue

from .conftest import QUORUM, World


def test_only_a_runner_that_runs_edge_tasks_is_given_one(world: World) -> None:
    owner, older = world.account(), world.account()
    newer = dataclasses.replace(world.account(), edge=True)
    edge_task, scored_task = world.tasks(owner, count=2)
    with world.db.write() as session:
        session.execute(update(Task).where(Task.id == edge_task).values(purpose=TASK_EDGE))

    claim = world.claim(older)
    assert claim is not None and claim.task_id == scored_task  # the edge task is passed over
    assert world.claim(older) is None
    assert world.task(edge_task).open_slots == QUORUM  # nothing taken from it
    if isinstance(world.queue, RedisStreamTaskQueue):
        # its entry went back to the stream for others, not dropped
        assert world.queue.redis.hget(world.queue.counts, str(edge_task)) is not None

    taken = {c.task_id for c in (world.claim(newer), world.claim(newer)) if c is not None}
    assert taken == {edge_task, scored_task}
    assert world.task(edge_task).open_slots == QUORUM - 1
    assert world.claim(newer) is None
