"""One account, one vote: however many runners an account has, a task counts one
result of it, so a Sybil cannot outvote honest accounts (on every queue backend)."""

from __future__ import annotations

from sqlalchemy import select

from quorumbench.db.models import Runner

from .conftest import QUORUM, World

WRONG, RIGHT = 0.0, 1.0


def test_ten_runners_of_one_account_count_once(world: World) -> None:
    owner, sybil = world.account(), world.account()
    runners = [sybil] + [world.second_runner(sybil) for _ in range(9)]
    [task_id] = world.tasks(owner)

    # All ten ask for the task; one of them gets the account's single slot.
    claims = [(runner, world.claim(runner)) for runner in runners]
    held = [(runner, claim) for runner, claim in claims if claim is not None]
    assert len(held) == 1
    (runner, claim), *_ = held
    assert world.submit(runner, claim, WRONG).task_status == "PENDING"
    assert all(world.claim(r) is None for r in runners)  # the slot was the account's

    # Two honest accounts answer otherwise: one wrong result against two right ones is
    # no agreement of three, so the task goes to fresh accounts, never to the Sybil.
    honest = [world.account() for _ in range(QUORUM - 1)]
    outcomes = [world.submit(h, world.claim(h), RIGHT) for h in honest]
    assert [o.task_status for o in outcomes] == ["PENDING", "DISPUTED"]
    assert all(world.claim(r) is None for r in runners)
    fresh = [world.account() for _ in range(2)]
    outcomes = [world.submit(f, world.claim(f), RIGHT) for f in fresh]
    assert [o.task_status for o in outcomes] == ["DISPUTED", "DONE"]

    task = world.task(task_id)
    assert (task.status, task.score) == ("DONE", RIGHT)
    results = world.results(task_id)
    from_sybil = [r for r in results if r.account_id == sybil.account_id]
    assert len(results) == 5 and len(from_sybil) == 1
    assert from_sybil[0].counted and from_sybil[0].outlier
    with world.db.read() as session:
        tally = {
            r.id: (r.agreements, r.outliers)
            for r in session.scalars(select(Runner).where(Runner.account_id == sybil.account_id))
        }
    assert sorted(tally.values()) == [(0, 0)] * 9 + [(0, 1)]  # one outlier, one runner
