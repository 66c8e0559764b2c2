"""The TaskQueue contract: one body per behaviour, run on every queue backend.

Backends (see conftest.py): ``sqlite``, ``postgres`` and ``postgres+redis``. The
tests go through the queue and ``submit_result`` only, so they hold for whatever
distributes the slots; the database is the source of truth in every backend. Two
races found on PostgreSQL are pinned here too (several runners of one account; an
expiry meeting a submission), and the last section checks what only the Redis
Streams queue promises (no doubled entries, re-queued skips, recovery).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError

from quorumbench.db.models import LeaderboardEntry, Lease, Result, Runner, Task
from quorumbench.errors import ConflictError, LeaseExpiredError, NotFoundError
from quorumbench.queue.base import Claim, Claimant
from quorumbench.queue.redis_streams import QueueUnavailableError, RedisStreamTaskQueue
from quorumbench.queue.sql import SqlTaskQueue

from .conftest import LEASE_SECONDS, N_SAMPLES, QUORUM, World


def _claim(world: World, claimant: Claimant) -> Claim:
    claim = world.claim(claimant)
    assert claim is not None
    return claim


# -- claiming ------------------------------------------------------------------------


def test_claim_returns_a_lease_with_attempt_expiry_and_the_task(world: World) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)

    claim = _claim(world, runner)

    assert claim.task_id == task_id
    assert claim.attempt == 1
    assert claim.expires_at == world.clock.now + timedelta(seconds=LEASE_SECONDS)
    task = claim.task.model_dump()
    assert task["id"] == task_id
    assert task["round"] == 1
    assert task["benchmark"]["name"] == "arith"
    assert task["model"]["ref"].startswith("hf:test/model-")
    assert task["sample_ids"] == [str(i) for i in range(N_SAMPLES)]
    assert task["n_samples"] == N_SAMPLES
    assert len(task["seed_commitment"]) == 64 and "seed" not in task  # secret until it ends
    assert world.task(task_id).open_slots == QUORUM - 1
    assert world.active_leases(task_id) == 1


def test_a_repeated_pull_key_returns_the_same_lease_and_strands_no_slot(world: World) -> None:
    owner, runner = world.account(), world.account()
    first_id, second_id = world.tasks(owner, count=2)

    first = world.claim(runner, key="pull-0001")
    again = world.claim(runner, key="pull-0001")  # the response was lost; the runner retried

    assert first is not None and again is not None
    assert (again.lease_id, again.attempt, again.task_id) == (
        first.lease_id,
        first.attempt,
        first.task_id,
    )
    assert again.task == first.task
    assert world.active_leases(first.task_id) == 1
    assert world.task(first.task_id).open_slots == QUORUM - 1
    fresh = world.claim(runner, key="pull-0002")  # a new pull gets a new task
    assert fresh is not None and fresh.task_id != first.task_id
    assert {first.task_id, fresh.task_id} == {first_id, second_id}
    # A key whose lease has ended (a very late retry) gets a new lease, not the old one.
    world.clock.advance(LEASE_SECONDS + 1)
    world.queue.expire(world.clock.now)
    late = world.claim(runner, key="pull-0001")
    assert late is not None and late.lease_id not in (first.lease_id, fresh.lease_id)
    # Keys are per runner: another runner's identical key is a different pull.
    other = world.account()
    theirs = world.claim(other, key="pull-0001")
    assert theirs is not None and theirs.lease_id != first.lease_id


def test_an_account_never_gets_two_slots_of_one_task(world: World) -> None:
    owner, runner, other = world.account(), world.account(), world.account()
    [task_id] = world.tasks(owner)

    assert _claim(world, runner).task_id == task_id
    assert world.claim(runner) is None
    assert world.claim(world.second_runner(runner)) is None  # same account, another runner
    assert _claim(world, other).task_id == task_id
    assert world.task(task_id).open_slots == QUORUM - 2


def test_the_owner_never_gets_its_own_models_task(world: World) -> None:
    owner, someone = world.account(), world.account()
    [own] = world.tasks(owner)

    assert world.claim(owner) is None
    [theirs] = world.tasks(someone)
    assert _claim(world, owner).task_id == theirs
    assert world.claim(owner) is None
    assert world.task(own).open_slots == QUORUM


def test_no_claim_when_nothing_is_open(world: World) -> None:
    owner = world.account()
    assert world.claim(world.account()) is None
    [task_id] = world.tasks(owner)
    for _ in range(QUORUM):
        _claim(world, world.account())
    assert world.claim(world.account()) is None
    assert world.task(task_id).open_slots == 0


def test_claims_spread_over_tasks(world: World) -> None:
    owner = world.account()
    ids = world.tasks(owner, 4)
    runner = world.account()
    claimed = [_claim(world, runner).task_id for _ in ids]
    assert sorted(claimed) == ids
    assert world.claim(runner) is None


# -- heartbeat and release -----------------------------------------------------------


def test_heartbeat_extends_the_lease(world: World) -> None:
    owner, runner = world.account(), world.account()
    world.tasks(owner)
    claim = _claim(world, runner)

    world.clock.advance(LEASE_SECONDS - 5)
    expires = world.queue.heartbeat(runner, claim.lease_id, claim.attempt, world.clock.now)
    assert expires == world.clock.now + timedelta(seconds=LEASE_SECONDS)

    world.clock.advance(LEASE_SECONDS - 5)  # past the first expiry, before the new one
    assert world.queue.expire(world.clock.now) == 0
    again = world.queue.heartbeat(runner, claim.lease_id, claim.attempt, world.clock.now)
    assert again > expires
    world.submit(runner, claim)


def test_heartbeat_and_release_after_expiry_raise_lease_expired(world: World) -> None:
    owner, runner = world.account(), world.account()
    world.tasks(owner)
    claim = _claim(world, runner)

    with pytest.raises(LeaseExpiredError):
        world.queue.heartbeat(runner, claim.lease_id, claim.attempt + 1, world.clock.now)
    with pytest.raises(LeaseExpiredError):
        world.queue.release(runner, claim.lease_id, claim.attempt + 1, world.clock.now)

    world.clock.advance(LEASE_SECONDS + 1)  # overdue, before any expire() ran
    with pytest.raises(LeaseExpiredError):
        world.queue.heartbeat(runner, claim.lease_id, claim.attempt, world.clock.now)
    with pytest.raises(LeaseExpiredError):
        world.queue.release(runner, claim.lease_id, claim.attempt, world.clock.now)

    assert world.queue.expire(world.clock.now) == 1
    with pytest.raises(LeaseExpiredError):
        world.queue.heartbeat(runner, claim.lease_id, claim.attempt, world.clock.now)
    with pytest.raises(LeaseExpiredError):
        world.queue.release(runner, claim.lease_id, claim.attempt, world.clock.now)


def test_another_accounts_lease_is_not_found(world: World) -> None:
    owner, runner, stranger = world.account(), world.account(), world.account()
    world.tasks(owner)
    claim = _claim(world, runner)

    with pytest.raises(NotFoundError):
        world.queue.heartbeat(stranger, claim.lease_id, claim.attempt, world.clock.now)
    with pytest.raises(NotFoundError):
        world.queue.release(stranger, claim.lease_id, claim.attempt, world.clock.now)
    with pytest.raises(NotFoundError):
        world.queue.heartbeat(runner, claim.lease_id + 1000, claim.attempt, world.clock.now)
    # The lease is untouched.
    world.queue.heartbeat(runner, claim.lease_id, claim.attempt, world.clock.now)


def test_release_reopens_the_slot_at_once(world: World) -> None:
    owner = world.account()
    [task_id] = world.tasks(owner)
    first, *others = [world.account() for _ in range(QUORUM)]
    claim = _claim(world, first)
    for runner in others:
        _claim(world, runner)
    late = world.account()
    assert world.claim(late) is None

    world.queue.release(first, claim.lease_id, claim.attempt, world.clock.now)

    again = _claim(world, late)
    assert again.task_id == task_id
    assert again.attempt == QUORUM + 1
    assert world.task(task_id).open_slots == 0
    with pytest.raises(LeaseExpiredError):
        world.submit(first, claim)


def test_a_failure_reopens_the_slot_for_other_accounts_only(world: World) -> None:
    owner, failing, other = world.account(), world.account(), world.account()
    [task_id] = world.tasks(owner)
    claim = _claim(world, failing)
    world.queue.release(failing, claim.lease_id, claim.attempt, world.clock.now, "no sandbox")
    assert world.task(task_id).open_slots == QUORUM
    assert world.claim(failing) is None  # not offered the task it failed again
    assert _claim(world, other).task_id == task_id
    with pytest.raises(LeaseExpiredError):
        world.submit(failing, claim)


# -- expiry and fencing --------------------------------------------------------------


def test_expired_leases_reopen_with_a_higher_attempt(world: World) -> None:
    owner, slow, fast = world.account(), world.account(), world.account()
    [task_id] = world.tasks(owner, quorum=1)
    old = _claim(world, slow)
    assert world.claim(fast) is None

    world.clock.advance(LEASE_SECONDS - 1)
    assert world.queue.expire(world.clock.now) == 0
    world.clock.advance(2)
    assert world.queue.expire(world.clock.now) == 1
    assert world.queue.expire(world.clock.now) == 0

    new = _claim(world, fast)
    assert new.task_id == task_id
    assert new.attempt > old.attempt
    with pytest.raises(LeaseExpiredError):
        world.queue.heartbeat(slow, old.lease_id, old.attempt, world.clock.now)
    with pytest.raises(LeaseExpiredError):
        world.submit(slow, old)
    assert not world.submit(fast, new).duplicate
    assert [r.account_id for r in world.results(task_id)] == [fast.account_id]


def test_a_result_under_an_expired_lease_is_refused_and_not_counted(world: World) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)
    claim = _claim(world, runner)

    world.clock.advance(LEASE_SECONDS)  # expires_at <= now: over, even before expire()
    with pytest.raises(LeaseExpiredError):
        world.submit(runner, claim)
    world.queue.expire(world.clock.now)
    with pytest.raises(LeaseExpiredError):
        world.submit(runner, claim)

    assert world.results(task_id) == []
    assert world.task(task_id).open_slots == QUORUM
    assert world.task(task_id).status == "PENDING"
    # The slot is claimable again, by the same account too (its lease did not count).
    assert _claim(world, runner).attempt == 2


# -- results and consensus -----------------------------------------------------------


def test_the_same_payload_twice_is_idempotent(world: World) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)
    claim = _claim(world, runner)

    first = world.submit(runner, claim, 0.5)
    second = world.submit(runner, claim, 0.5)

    assert not first.duplicate
    assert second.duplicate
    assert second.result_id == first.result_id
    assert len(world.results(task_id)) == 1
    with pytest.raises(ConflictError):
        world.submit(runner, claim, 1.0)  # a different payload under the same lease
    assert len(world.results(task_id)) == 1
    assert world.claim(runner) is None  # a submitted slot still counts as this account's


def test_three_accounts_reach_done_and_the_leaderboard(world: World) -> None:
    owner = world.account()
    [task_id] = world.tasks(owner)
    runners = [world.account() for _ in range(QUORUM)]
    claims = [_claim(world, r) for r in runners]

    statuses = [
        world.submit(r, c, s).task_status
        # 0.995 lies within the per-sample epsilon (0.01) of 1: the same answers
        for r, c, s in zip(runners, claims, [0.995, 1, 1], strict=True)
    ]

    assert statuses == ["PENDING", "PENDING", "DONE"]
    task = world.task(task_id)
    assert (task.status, task.score, task.finalized_at) == ("DONE", 1.0, world.clock.now)
    with world.db.read() as session:
        entry = session.execute(
            select(
                LeaderboardEntry.n_tasks, LeaderboardEntry.n_samples, LeaderboardEntry.score
            ).where(LeaderboardEntry.model_id == task.model_id)
        ).one()
    assert tuple(entry) == (1, N_SAMPLES, 1.0)
    assert world.claim(world.account()) is None


def test_a_disputed_task_is_claimable_again_by_fresh_accounts(world: World) -> None:
    owner = world.account()
    [task_id] = world.tasks(owner)
    first = [world.account() for _ in range(QUORUM)]
    for runner, score in zip(first, [0.0, 0.0, 1.0], strict=True):
        outcome = world.submit(runner, _claim(world, runner), score)

    assert outcome.task_status == "DISPUTED"
    task = world.task(task_id)
    assert (task.status, task.round, task.quorum, task.open_slots) == ("DISPUTED", 2, 5, 2)
    assert task.finalized_at is None
    for runner in first:
        assert world.claim(runner) is None  # they voted already
    assert world.claim(owner) is None

    fresh = [world.account() for _ in range(2)]
    claims = [_claim(world, r) for r in fresh]
    assert {c.task_id for c in claims} == {task_id}
    assert {c.task.round for c in claims} == {2}
    assert world.claim(world.account()) is None

    outcomes = [world.submit(r, c, 0.0) for r, c in zip(fresh, claims, strict=True)]
    assert [o.task_status for o in outcomes] == ["DISPUTED", "DONE"]
    task = world.task(task_id)
    assert (task.status, task.score) == ("DONE", 0.0)
    assert len(world.results(task_id)) == 5


# -- concurrency ---------------------------------------------------------------------

N_RUNNERS = 20
N_TASKS = 200  # x quorum 3 = 600 slots


def test_concurrent_runners_fill_every_slot_exactly_once(world: World) -> None:
    accounts = [world.account() for _ in range(N_RUNNERS)]
    task_ids: list[int] = []
    for i in range(N_TASKS):  # models owned by the runners' own accounts
        task_ids += world.tasks(accounts[i % N_RUNNERS])
    owners = {t: accounts[i % N_RUNNERS].account_id for i, t in enumerate(task_ids)}
    errors: list[BaseException] = []
    done: Counter[int] = Counter()
    start = threading.Barrier(N_RUNNERS)

    def run(claimant: Claimant) -> None:
        try:
            start.wait()
            while (claim := world.claim(claimant)) is not None:
                assert owners[claim.task_id] != claimant.account_id
                world.submit(claimant, claim, 1.0)
                done[claimant.account_id] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in accounts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "runners still busy after 120 s"
    assert not errors, "\n\n".join(str(e) for e in errors)

    with world.db.read() as session:
        tasks = list(session.scalars(select(Task).where(Task.id.in_(task_ids))))
        results = list(session.scalars(select(Result)))
        session.expunge_all()
        leases = Counter(session.scalars(select(Lease.state)))
        leases_per_task = Counter(session.scalars(select(Lease.task_id)))
        active = session.scalar(select(func.count()).where(Lease.state == "ACTIVE"))
        agreements = session.scalar(select(func.sum(Runner.agreements)))
    assert {t.status for t in tasks} == {"DONE"}, "a slot was lost"
    assert all(t.open_slots == 0 and t.finalized_at is not None for t in tasks)
    per_task = Counter(r.task_id for r in results)
    assert per_task == dict.fromkeys(task_ids, QUORUM), "a task was over- or under-assigned"
    assert len({(r.task_id, r.account_id) for r in results}) == len(results)
    assert all(r.counted for r in results)
    assert all(owners[r.task_id] != r.account_id for r in results)
    assert leases == {"SUBMITTED": N_TASKS * QUORUM}
    assert leases_per_task == dict.fromkeys(task_ids, QUORUM), "a slot was leased twice"
    assert active == 0
    assert agreements == N_TASKS * QUORUM, "a reputation update was lost"
    assert sum(done.values()) == N_TASKS * QUORUM


def test_runners_of_one_account_pulling_at_once_get_one_slot_per_task(world: World) -> None:
    owner, account = world.account(), world.account()
    runners = [account] + [world.second_runner(account) for _ in range(7)]
    task_ids = world.tasks(owner, 60)
    errors: list[BaseException] = []
    start = threading.Barrier(len(runners))

    def run(claimant: Claimant) -> None:
        try:
            start.wait()
            while world.claim(claimant) is not None:
                pass
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, "\n\n".join(str(e) for e in errors)
    with world.db.read() as session:
        leased = Counter(
            session.scalars(select(Lease.task_id).where(Lease.account_id == account.account_id))
        )
    assert leased == dict.fromkeys(task_ids, 1)


def test_expiry_never_undoes_a_submission_that_held_the_lease(world: World) -> None:
    owner, runner = world.account(), world.account()
    [task_id] = world.tasks(owner)
    claim = _claim(world, runner)
    late = world.clock.now + timedelta(seconds=LEASE_SECONDS + 1)
    expired: list[int] = []
    # A submission holds the lease row (as submit_result does) when the lease runs out.
    with world.db.write() as session:
        query = select(Lease).where(Lease.id == claim.lease_id)
        if world.db.dialect == "postgresql":
            query = query.with_for_update()
        session.scalars(query).one().state = "SUBMITTED"
        session.flush()
        expirer = threading.Thread(target=lambda: expired.append(world.queue.expire(late)))
        expirer.start()
        time.sleep(0.5)  # let expire() reach the lease and wait for our lock
    expirer.join(timeout=30)

    assert expired == [0]
    with world.db.read() as session:
        assert session.get_one(Lease, claim.lease_id).state == "SUBMITTED"
    assert world.task(task_id).open_slots == QUORUM - 1


# -- the Redis Streams queue only ----------------------------------------------------


def _redis(world: World) -> RedisStreamTaskQueue:
    assert isinstance(world.queue, RedisStreamTaskQueue)
    return world.queue


def _no_sql_fallback(monkeypatch: pytest.MonkeyPatch, queue: RedisStreamTaskQueue) -> None:
    def refuse(claimant: Claimant, now: object) -> None:
        pytest.fail("the claim fell back to SQL; the stream should have served it")

    monkeypatch.setattr(queue.sql, "claim", refuse)


def test_redis_publishing_again_does_not_double_the_slots(redis_world: World) -> None:
    queue = _redis(redis_world)
    [task_id] = redis_world.tasks(redis_world.account())
    queue.publish([task_id, task_id])
    queue.publish([task_id])
    queue.republish_open()
    assert queue.redis.xlen(queue.stream) == QUORUM
    assert queue.redis.hget(queue.counts, str(task_id)) == str(QUORUM)


def test_redis_serves_claims_from_the_stream(
    redis_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _redis(redis_world)
    owner = redis_world.account()
    [task_id] = redis_world.tasks(owner)
    _no_sql_fallback(monkeypatch, queue)
    for _ in range(QUORUM):
        assert _claim(redis_world, redis_world.account()).task_id == task_id
    assert queue.redis.xlen(queue.stream) == 0
    assert queue.redis.hlen(queue.counts) == 0


def test_redis_entries_an_account_may_not_take_go_back(
    redis_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _redis(redis_world)
    owner = redis_world.account()
    [task_id] = redis_world.tasks(owner)
    assert redis_world.claim(owner) is None  # read all three, put all three back
    assert queue.redis.xlen(queue.stream) == QUORUM
    assert queue.redis.xpending(queue.stream, queue.group)["pending"] == 0
    _no_sql_fallback(monkeypatch, queue)
    assert _claim(redis_world, redis_world.account()).task_id == task_id


def test_redis_recovers_entries_of_a_consumer_that_died(
    redis_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _redis(redis_world)
    [task_id] = redis_world.tasks(redis_world.account(), quorum=1)
    # A replica read the entry and died before its database commit.
    queue.redis.xreadgroup(queue.group, "dead:0", {queue.stream: ">"}, count=1)
    assert queue.redis.xpending(queue.stream, queue.group)["pending"] == 1

    redis_world.queue.expire(redis_world.clock.now)  # reclaim_after=0 in this fixture

    assert queue.redis.xpending(queue.stream, queue.group)["pending"] == 0
    _no_sql_fallback(monkeypatch, queue)
    assert _claim(redis_world, redis_world.account()).task_id == task_id


def test_redis_lost_entries_are_still_found_and_republished(redis_world: World) -> None:
    queue = _redis(redis_world)
    [task_id] = redis_world.tasks(redis_world.account())
    queue.redis.delete(queue.stream, queue.counts)  # a restart without persistence

    assert _claim(redis_world, redis_world.account()).task_id == task_id  # SQL fallback
    redis_world.queue.expire(redis_world.clock.now)  # the scheduler tick re-publishes
    assert queue.redis.xlen(queue.stream) == QUORUM - 1


def test_redis_stale_entries_are_dropped(redis_world: World) -> None:
    queue = _redis(redis_world)
    [task_id] = redis_world.tasks(redis_world.account(), quorum=1)
    queue.redis.xadd(queue.stream, {"task": str(task_id)})  # a spare entry
    queue.redis.hincrby(queue.counts, str(task_id), 1)
    _claim(redis_world, redis_world.account())
    assert redis_world.claim(redis_world.account()) is None
    assert queue.redis.xlen(queue.stream) == 0
    assert queue.redis.hlen(queue.counts) == 0


def test_redis_that_cannot_be_reached_is_an_error_not_a_fallback(redis_world: World) -> None:
    sql = _redis(redis_world).sql
    assert isinstance(sql, SqlTaskQueue)
    [task_id] = redis_world.tasks(redis_world.account())
    broken = RedisStreamTaskQueue(
        sql, "redis://:secret@127.0.0.1:1/0", "qb:test:unreachable", socket_timeout=1
    )
    try:
        with pytest.raises(QueueUnavailableError, match="cannot reach Redis at") as info:
            broken.claim(redis_world.account(), redis_world.clock.now)
        assert "secret" not in str(info.value)
        with pytest.raises(QueueUnavailableError):
            broken.publish([task_id])
    finally:
        broken.close()


def test_the_database_refuses_a_second_live_lease_of_one_account_on_a_task(world: World) -> None:
    # The guarantee behind the claim query: even a claim that slipped past it (a stale
    # snapshot on PostgreSQL) cannot commit a second slot for the same account.
    owner, account = world.account(), world.account()
    (task_id,) = world.tasks(owner, 1)
    claim = world.claim(account)
    assert claim is not None and claim.task_id == task_id
    second = world.second_runner(account)
    now = world.clock.now
    row = {
        "task_id": task_id,
        "runner_id": second.runner_id,
        "account_id": account.account_id,
        "attempt": 99,
        "round": 1,
        "leased_at": now,
        "expires_at": now,
    }
    for state in ("ACTIVE", "SUBMITTED"):
        with pytest.raises(IntegrityError), world.db.write_connection() as conn:
            conn.execute(insert(Lease).values(**row, state=state))
    with world.db.write_connection() as conn:  # an ended lease holds no slot
        conn.execute(insert(Lease).values(**row, state="EXPIRED"))
