"""Redis Streams as the distribution layer of the task queue; the database stays the truth.

Every open slot of a task is one stream entry (``task=<id>``), read by runners
through one consumer group (consumer ``<account id>:<runner id>``). Leases,
fencing tokens and slot counts stay in the database: an entry is only a hint
that a task *may* have a free slot. Claiming an entry locks the task row
(``FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), re-checks that
this account may take it and leases it with :meth:`SqlTaskQueue.take`.

What happens to an entry a runner reads:

* eligible: the slot is leased, the entry acknowledged and deleted;
* no open slot any more (finalized, or every slot leased), or its model is paused
  (or retired):
  acknowledged and deleted while the task row is still locked, so a slot reopened
  right after is published again rather than thought covered (``publish`` and
  ``republish_open`` leave a paused model's tasks out; resuming it republishes them,
  and an entry dropped while a resume commits comes back with the next tick's
  ``republish_open``);
* not for this account (it owns the model, or already holds or submitted a slot):
  *re-queued* — one Lua script acknowledges and deletes it and adds a copy at the
  tail of the stream for the other runners. We do not leave it pending for someone
  else to ``XCLAIM``: a consumer reading ``>`` never sees other consumers' pending
  entries, so that would need a steal on every pull and would blur the line
  between "skipped" and "its consumer died". A claim stops when it meets an entry
  it re-queued itself (it went round the stream) or after ``max_scan`` entries.

A hash ``<stream>:outstanding`` counts the entries of each task in the stream. Each
change to it happens in the same Lua script as the stream change, so it always
equals the entries present; ``publish`` adds ``open_slots - outstanding`` entries
(never a negative number), so re-publishing never doubles the entries for a slot.
Spare entries (e.g. a slot leased through the SQL fallback) are harmless: they are
dropped when read.

If the stream has nothing this runner may claim, ``claim`` runs the SQL claim once,
so tasks whose entries were lost are still found. ``expire`` (called by the
scheduler on every tick) expires leases in the database, re-queues entries whose
consumer died between ``XREADGROUP`` and the acknowledgement (``XAUTOCLAIM`` after
one lease length of idleness) and re-publishes every open task, which restores the
stream after data loss.

Deployment: the Redis option needs AOF persistence (``appendonly yes``) to keep its
promise that published slots survive a Redis restart; without it, the SQL fallback
still finds the work but loses the fast path until the next scheduler tick
re-publishes it. Use ``maxmemory-policy noeviction``: evicting the stream or its
counter hash would leave slots without entries. Connection errors are never
hidden by falling back to SQL: they raise :class:`QueueUnavailableError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from enum import Enum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import RedisError, ResponseError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from quorumbench.db.models import Lease, Model, Task
from quorumbench.errors import ConfigError, QueueUnavailableError
from quorumbench.queue.base import Claim, Claimant
from quorumbench.queue.sql import SqlTaskQueue

log = logging.getLogger(__name__)

_CHUNK = 500
_REAPER = "reaper"

# KEYS: stream, counts. ARGV: task, open slots, task, open slots, ...
_PUBLISH = """
local added = 0
for i = 1, #ARGV, 2 do
  local task = ARGV[i]
  local missing = tonumber(ARGV[i + 1]) - tonumber(redis.call('HGET', KEYS[2], task) or '0')
  for _ = 1, missing do
    redis.call('XADD', KEYS[1], '*', 'task', task)
  end
  if missing > 0 then
    redis.call('HINCRBY', KEYS[2], task, missing)
    added = added + missing
  end
end
return added
"""

# KEYS: stream, counts. ARGV: group, entry id, task. Acknowledge and remove one entry.
_FINISH = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 1 then
  if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) <= 0 then
    redis.call('HDEL', KEYS[2], ARGV[3])
  end
  return 1
end
return 0
"""

# KEYS: stream. ARGV: group, entry id, task. Move one entry to the tail (count unchanged).
_REQUEUE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 1 then
  return redis.call('XADD', KEYS[1], '*', 'task', ARGV[3])
end
return false
"""


_OPEN_SLOTS = (
    select(Task.id, Task.open_slots)
    .join(Model, Model.id == Task.model_id)
    .where(
        Task.finalized_at.is_(None),
        Task.open_slots > 0,
        Model.paused_at.is_(None),
        Model.retired_at.is_(None),
    )
)
"""Open tasks' slots, leaving out paused models' tasks (not claimable until resumed) and
retired models' (never again)."""


class _Skip(Enum):
    GONE = "gone"  # no open slot any more: the entry was dropped
    INELIGIBLE = "ineligible"  # not for this account: the entry goes back


def _redacted(url: str) -> str:
    """``url`` without its password, for error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """The (id, fields) pairs of an XREADGROUP reply (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else (item[1] for item in reply)
    found: list[tuple[str, dict[str, str]]] = []
    for stream in streams:
        for batch in stream:
            if batch and isinstance(batch[0], str):  # RESP2: one (id, fields) pair
                found.append((batch[0], batch[1] or {}))
            else:  # RESP3: a list of pairs
                found.extend((entry_id, fields or {}) for entry_id, fields in batch)
    return found


class RedisStreamTaskQueue:
    """Leases in the database, distribution through a Redis stream; see the module docstring."""

    def __init__(
        self,
        sql: SqlTaskQueue,
        redis_url: str,
        stream: str,
        *,
        group: str = "runners",
        max_scan: int = 32,
        reclaim_after: timedelta | None = None,
        socket_timeout: float = 5.0,
    ) -> None:
        self.sql = sql
        self.stream = stream
        self.counts = f"{stream}:outstanding"
        self.group = group
        self.max_scan = max_scan
        self.reclaim_after = reclaim_after if reclaim_after is not None else sql.lease
        self._where = _redacted(redis_url)
        try:
            self.redis = redis.Redis.from_url(
                redis_url,
                decode_responses=True,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_timeout,
            )
        except ValueError as exc:
            raise ConfigError(f"invalid Redis URL {self._where!r}: {exc}") from exc
        self._publish_script = self.redis.register_script(_PUBLISH)
        self._finish_script = self.redis.register_script(_FINISH)
        self._requeue_script = self.redis.register_script(_REQUEUE)
        self._group_ready = False

    # -- Redis plumbing ---------------------------------------------------------------

    @contextmanager
    def _redis_errors(self) -> Iterator[None]:
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise QueueUnavailableError(
                f"cannot reach Redis at {self._where} (task queue {self.stream!r}): {exc}"
            ) from exc
        except RedisError as exc:
            raise QueueUnavailableError(
                f"Redis at {self._where} failed on task queue {self.stream!r}: {exc}"
            ) from exc

    def _ensure_group(self, *, force: bool = False) -> None:
        if self._group_ready and not force:
            return
        try:
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _lost_group(self) -> None:
        """The stream (and its group) vanished, e.g. Redis restarted without AOF."""
        log.warning("task stream %r lost its consumer group; recreating it", self.stream)
        self.redis.delete(self.counts)  # the counts describe entries that are gone
        self._ensure_group(force=True)

    def _read_one(self, consumer: str) -> tuple[str, dict[str, str]] | None:
        self._ensure_group()
        try:
            reply = self.redis.xreadgroup(self.group, consumer, {self.stream: ">"}, count=1)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._lost_group()
            reply = self.redis.xreadgroup(self.group, consumer, {self.stream: ">"}, count=1)
        found = _entries(reply)
        return found[0] if found else None

    def _finish(self, entry_id: str, task: str) -> None:
        self._finish_script(keys=[self.stream, self.counts], args=[self.group, entry_id, task])

    def _requeue(self, entry_id: str, task: str) -> str | None:
        new_id = self._requeue_script(keys=[self.stream], args=[self.group, entry_id, task])
        return str(new_id) if new_id else None

    def _publish_slots(self, slots: Sequence[tuple[int, int]]) -> None:
        for start in range(0, len(slots), _CHUNK):
            args: list[int] = []
            for task_id, open_slots in slots[start : start + _CHUNK]:
                args += [task_id, open_slots]
            with self._redis_errors():
                self._ensure_group()
                self._publish_script(keys=[self.stream, self.counts], args=args)

    # -- the TaskQueue protocol -------------------------------------------------------

    def publish(self, task_ids: list[int]) -> None:
        """Add stream entries for open slots of ``task_ids`` that have none yet."""
        ids = sorted(set(task_ids))
        slots: list[tuple[int, int]] = []
        with self.sql.db.read() as session:
            for start in range(0, len(ids), _CHUNK):
                rows = session.execute(_OPEN_SLOTS.where(Task.id.in_(ids[start : start + _CHUNK])))
                slots += [(row.id, row.open_slots) for row in rows]
        self._publish_slots(slots)

    def claim(self, claimant: Claimant, now: datetime, key: str | None = None) -> Claim | None:
        """Lease a slot found through the stream, else through the SQL claim (once)."""
        prior, key = self.sql.replay(claimant, key, now)
        if prior is not None:
            return prior
        consumer = f"{claimant.account_id}:{claimant.runner_id}"
        not_mine: set[str] = set()  # tasks this account may not take
        requeued: set[str] = set()  # entries this call put back at the tail
        with self._redis_errors():
            for _ in range(self.max_scan):
                entry = self._read_one(consumer)
                if entry is None:
                    break
                entry_id, fields = entry
                task = fields.get("task", "")
                if not task.isdigit():
                    log.warning("dropping malformed task entry %s %r", entry_id, fields)
                    self.redis.xack(self.stream, self.group, entry_id)
                    self.redis.xdel(self.stream, entry_id)
                    continue
                if entry_id in requeued:  # went round the whole stream
                    self._requeue(entry_id, task)
                    break
                try:
                    outcome = (
                        _Skip.INELIGIBLE
                        if task in not_mine
                        else self._try_lease(entry_id, int(task), claimant, now, key)
                    )
                except Exception:
                    # No lease was made (or its commit is in doubt): give the entry
                    # back now instead of leaving it to the reaper. Best effort.
                    with suppress(RedisError):
                        self._requeue(entry_id, task)
                    raise
                if isinstance(outcome, Claim):
                    return outcome
                if outcome is _Skip.INELIGIBLE:
                    not_mine.add(task)
                    new_id = self._requeue(entry_id, task)
                    if new_id is not None:
                        requeued.add(new_id)
        claim = self.sql.claim(claimant, now, key)
        if claim is not None:
            log.debug("task %s leased through the SQL fallback", claim.task_id)
        return claim

    def _try_lease(
        self, entry_id: str, task_id: int, claimant: Claimant, now: datetime, key: str | None
    ) -> Claim | _Skip:
        db = self.sql.db
        try:
            with db.write_connection() as conn:
                query = (
                    select(Task.finalized_at, Task.open_slots, Model.paused_at, Model.retired_at)
                    .join(Model, Model.id == Task.model_id)
                    .where(Task.id == task_id)
                )
                if db.dialect == "postgresql":
                    query = query.with_for_update(of=Task)
                task = conn.execute(query).first()
                if (
                    task is None
                    or task.finalized_at is not None
                    or task.open_slots <= 0
                    or task.paused_at is not None
                    or task.retired_at is not None
                ):
                    # Dropped while the row is locked: a slot reopened later publishes anew.
                    self._finish(entry_id, str(task_id))
                    return _Skip.GONE
                # A separate statement after the lock, so it sees leases committed since.
                claim = self.sql.take(conn, claimant, now, key, task_id)
                if claim is None:
                    return _Skip.INELIGIBLE
        except IntegrityError:
            # This account's live lease on the task, committed after our snapshot
            # (see queue/sql.py): rolled back, and not this account's task.
            return _Skip.INELIGIBLE
        try:
            self._finish(entry_id, str(task_id))
        except RedisError:
            # The lease is committed and valid; the entry stays pending and expire()
            # re-queues it after one lease length (a spare entry, dropped when read).
            log.warning("could not acknowledge task entry %s", entry_id, exc_info=True)
        return claim

    def heartbeat(self, claimant: Claimant, lease_id: int, attempt: int, now: datetime) -> datetime:
        return self.sql.heartbeat(claimant, lease_id, attempt, now)

    def release(
        self,
        claimant: Claimant,
        lease_id: int,
        attempt: int,
        now: datetime,
        failure: str | None = None,
    ) -> None:
        self.sql.release(claimant, lease_id, attempt, now, failure)
        with self.sql.db.read() as session:
            task_id = session.get_one(Lease, lease_id).task_id
        self.publish([task_id])

    def expire(self, now: datetime) -> int:
        expired = self.sql.expire(now)
        with self._redis_errors():
            self._recover_stalled()
        self.republish_open()
        return expired

    def republish_open(self) -> None:
        """Publish every open slot that has no entry (after expiry, restarts, data loss)."""
        with self.sql.db.read() as session:
            rows = session.execute(_OPEN_SLOTS.order_by(Task.id))
            slots = [(row.id, row.open_slots) for row in rows]
        self._publish_slots(slots)

    def _recover_stalled(self) -> None:
        """Re-queue entries left pending by consumers that died before acknowledging."""
        idle_ms = max(int(self.reclaim_after.total_seconds() * 1000), 0)
        self._ensure_group()
        start = "0-0"
        while True:
            try:
                reply: list[Any] = self.redis.xautoclaim(
                    self.stream, self.group, _REAPER, idle_ms, start_id=start, count=100
                )
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._lost_group()
                return
            start = str(reply[0])
            for entry_id, fields in _claimed(reply[1]):
                task = (fields or {}).get("task", "")
                if task.isdigit():
                    self._requeue(entry_id, task)
                else:
                    self.redis.xack(self.stream, self.group, entry_id)
                    self.redis.xdel(self.stream, entry_id)
            if start == "0-0":
                return

    def check(self) -> list[str]:
        """PING Redis (QueueUnavailableError naming what to start if it does not answer);
        a warning when it runs without AOF persistence (see the module docstring)."""
        try:
            self.redis.ping()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise QueueUnavailableError(
                f"cannot reach Redis at {self._where} (the task queue): {exc}; start Redis "
                "there or fix QB_QUEUE__REDIS_URL / --queue"
            ) from exc
        except RedisError as exc:
            raise QueueUnavailableError(f"Redis at {self._where} refused PING: {exc}") from exc
        try:
            appendonly = self.redis.config_get("appendonly").get("appendonly")
        except RedisError:  # CONFIG is often disabled on managed Redis: nothing to say
            return []
        if appendonly == "no":
            return [
                f"Redis at {self._where} runs without AOF persistence (appendonly no): task "
                "slots published to the stream do not survive a Redis restart (the server "
                "finds them again through the database, more slowly); run Redis with "
                "--appendonly yes (docs/server.md, Running in production)"
            ]
        return []

    def describe(self) -> str:
        return f"redis {self._where} (stream {self.stream!r})"

    def close(self) -> None:
        """Close the Redis connections; the database belongs to the caller."""
        self.redis.close()


def _claimed(entries: Iterable[Any]) -> Iterator[tuple[str, dict[str, str] | None]]:
    for item in entries:
        if item:
            yield str(item[0]), item[1]
