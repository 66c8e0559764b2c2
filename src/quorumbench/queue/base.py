"""The TaskQueue contract shared by the SQL and Redis Streams queues.

The database is the source of truth for tasks and leases in both: a lease row is
created, extended, released or expired in the same transaction that changes the
task's open slots. The Redis queue only changes *how a runner finds* a claimable
task (a consumer-group read instead of an indexed SELECT).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from quorumbench.protocol import LEGACY_ENGINES, Engine, Task


@dataclass(frozen=True)
class Claimant:
    """Who is pulling: the runner and the account it belongs to, whether the runner
    runs edge tasks (it speaks ``protocol.EDGE_SINCE``; only then is it offered one),
    and the engines it has (it is offered only tasks of models evaluated by one; an
    ``hf:`` adapter on llama.cpp only when ``gguf_adapters``, i.e. it speaks
    ``protocol.GGUF_ADAPTER_SINCE``)."""

    account_id: int
    runner_id: int
    edge: bool = False
    engines: tuple[Engine, ...] = LEGACY_ENGINES
    gguf_adapters: bool = False


@dataclass(frozen=True)
class Claim:
    """A leased task: what to evaluate and the fencing token to submit under."""

    lease_id: int
    attempt: int
    task_id: int
    expires_at: datetime
    task: Task


class TaskQueue(Protocol):
    """Leasing of task slots."""

    def claim(self, claimant: Claimant, now: datetime, key: str | None = None) -> Claim | None:
        """Lease one slot of a task this account may work on, or None.

        ``key`` is the runner's idempotency key for this pull: a repeated pull with the
        same key (a retry after a lost response) returns the lease the first one made
        instead of leasing a second slot.
        """
        ...

    def heartbeat(self, claimant: Claimant, lease_id: int, attempt: int, now: datetime) -> datetime:
        """Extend an active lease; the new expiry. Raises LeaseExpiredError."""
        ...

    def release(
        self,
        claimant: Claimant,
        lease_id: int,
        attempt: int,
        now: datetime,
        failure: str | None = None,
    ) -> None:
        """Give a lease back at once (its slot is claimable again).

        With a ``failure`` (why the runner could not evaluate the task) the lease ends
        FAILED and keeps the reason, and the account is not offered the task again.
        """
        ...

    def expire(self, now: datetime) -> int:
        """Expire overdue leases and reopen their slots; how many expired."""
        ...

    def publish(self, task_ids: list[int]) -> None:
        """Tell the queue these tasks have new open slots (new, released, re-queued)."""
        ...

    def check(self) -> list[str]:
        """Raise QueueUnavailableError if the queue cannot be used now; else the
        warnings an operator should see (e.g. Redis without AOF persistence)."""
        ...

    def describe(self) -> str:
        """Where the queue lives, as it may be printed (no password)."""
        ...

    def close(self) -> None: ...
