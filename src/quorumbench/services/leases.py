"""A runner's leases, for the API: pull, heartbeat, release, report a failure.

The routes authenticate the caller and find its runner (``services/runners.py``),
then call these; the queue (``queue/``, SQL or Redis Streams) does the leasing, and
the clock is the context's. :func:`runs_inline` tells the API how to run this work.
"""

from __future__ import annotations

from datetime import datetime

from quorumbench.queue.base import Claim, Claimant
from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services.context import ServerContext
from quorumbench.services.failures import report_failure

__all__ = ["Claim", "Claimant", "heartbeat", "pull", "release", "report_failure", "runs_inline"]


def pull(ctx: ServerContext, claimant: Claimant, key: str | None) -> Claim | None:
    """Lease one task slot this runner's account may work on, or None.

    A repeated ``key`` (a retry after a lost response) returns the lease the first
    pull with it made.
    """
    return ctx.queue.claim(claimant, ctx.now(), key)


def heartbeat(ctx: ServerContext, claimant: Claimant, lease_id: int, attempt: int) -> datetime:
    """Extend an active lease; its new expiry (LeaseExpiredError when it is over)."""
    return ctx.queue.heartbeat(claimant, lease_id, attempt, ctx.now())


def release(ctx: ServerContext, claimant: Claimant, lease_id: int, attempt: int) -> None:
    """Give a lease back now: its slot is claimable again at once."""
    ctx.queue.release(claimant, lease_id, attempt, ctx.now())


def runs_inline(ctx: ServerContext) -> bool:
    """Whether the runner endpoints' work runs on the event loop itself (no thread).

    So on SQLite with the SQL queue: SQLite runs one write transaction at a time and
    each is a few local statements, so a trip to a thread would only add the cost of
    the hand-off (measured: about 10% more CPU per pull under load); a write waiting
    on another process's lock holds up the loop for that long. Otherwise (PostgreSQL,
    or Redis in the path) a few threads of their own overlap the network waits.
    """
    return ctx.db.dialect == "sqlite" and isinstance(ctx.queue, SqlTaskQueue)
