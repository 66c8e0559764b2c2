"""A pool's lifecycle, driven by the scheduler's tick (``services/scheduler.py``).

Each tick, for every active pool (idempotent, and safe on several replicas at once):

* **Snapshots**: the board at each period boundary passed (``starts_at + p ×
  period_s`` for p = 0, 1, … up to the end), counting the tasks finalized by that
  boundary, so a late tick stores the same board an early one would have. One row per
  (pool, period): ``INSERT … ON CONFLICT DO NOTHING``, so a second replica's insert
  is a no-op.
* **Joins close** at the join deadline (``joins_closed_at``; joining checks the
  deadline itself, this records when).
* **The end** + ``QB_POOL_FINALIZE_GRACE_S`` (the cut-off, ``standing_at``) freezes the
  final standing (``final_standing``, ``ended_at``): the board as of the cut-off, so the
  last epochs' tasks may still finalize and a late tick freezes the same standing as an
  early one. ``settle_after`` = cut-off + ``QB_POOL_DISPUTE_WINDOW_S``; a conditional
  update (``WHERE ended_at IS NULL``) lets one replica freeze it.
* **A held-out final split** (``services/pool_final.py``): a pool that committed to
  one waits for its funder's reveal until the reveal deadline; once revealed, the
  tick makes the held-out tasks (once) and freezes the standing on them when they
  are all final or at their deadline (``settle_after`` = that cut-off + the dispute
  window). Unrevealed by the deadline, the pool ends on its pool board as above.
* **Settlement**, once ``settle_after`` has passed, in ONE transaction: the pool's row
  locked (``FOR UPDATE`` on PostgreSQL; a SQLite write transaction holds the whole
  database), its status checked again (``active``), the allocation
  (``core/allocation.allocate`` of the frozen standing), a ledger transfer from the
  escrow for each amount above zero (``payout``), or the whole escrow back to the
  funder when the rule pays nobody (``refund``), the ``pool_payouts`` row (its primary
  key is the pool: written once), the payout record appended to the public log
  (``core/payouts.payout_record``) and the status ``settled``. Two replicas settling
  at once pay once: the second finds the pool settled and does nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from quorumbench.core.allocation import Standing, allocate, parse_rule
from quorumbench.core.payouts import payout_record
from quorumbench.db.pool_models import Pool, PoolEntry, PoolPayout, PoolSnapshot
from quorumbench.errors import QuorumError
from quorumbench.logs import event
from quorumbench.services import ledger, publiclog
from quorumbench.services.context import ServerContext
from quorumbench.services.pool_board import board, entry_views, rows_of, standing_json
from quorumbench.services.pool_final import (
    held_out_cutoff,
    held_out_standings,
    reveal_deadline,
    schedule_final,
    split_record,
)

log = logging.getLogger("quorumbench.pools")


@dataclass(frozen=True)
class PoolTickReport:
    snapshots: int = 0
    joins_closed: int = 0
    ended: int = 0
    settled: int = 0

    @property
    def changes(self) -> int:
        return self.snapshots + self.joins_closed + self.ended + self.settled


def pool_tick(ctx: ServerContext, epoch_id: int) -> PoolTickReport:
    """One pass over the active pools (module docstring); ``epoch_id`` is the current
    epoch's (held-out tasks are made in it). A pool whose step fails is logged and left
    for the next tick; the others go on."""
    now = ctx.now()
    with ctx.db.read() as session:
        pools = list(
            session.scalars(
                select(Pool).where(Pool.status == "active", Pool.starts_at <= now).order_by(Pool.id)
            )
        )
    counts = [0, 0, 0, 0]
    for pool in pools:
        try:
            counts[0] += take_snapshots(ctx, pool, now)
            if pool.joins_closed_at is None and now >= pool.join_deadline:
                counts[1] += _close_joins(ctx, pool.id, now)
            if pool.ended_at is None and pool.final_benchmark_id is not None:
                counts[2] += min(1, schedule_final(ctx, pool, epoch_id))  # one step
                counts[2] += freeze_held_out(ctx, pool.id, now)
            elif pool.ended_at is None and now >= board_cutoff(ctx, pool):
                counts[2] += freeze(ctx, pool, now)
            counts[3] += settle(ctx, pool.id)
        except QuorumError as exc:
            event(log, "pool.tick_failed", level=logging.WARNING, pool=pool.id, error=exc.message)
        except Exception as exc:  # a bug in one pool's step must not stop the others'
            event(
                log,
                "pool.tick_failed",
                level=logging.ERROR,
                pool=pool.id,
                error=f"{type(exc).__name__}: {exc}",
            )
    return PoolTickReport(*counts)


def _boundary(pool: Pool, period: int) -> datetime:
    return pool.starts_at + timedelta(seconds=period * pool.period_s)


def due_periods(pool: Pool, now: datetime) -> range:
    """The periods whose boundary has passed (0 at the start), up to the end."""
    until = min(now, pool.ends_at)
    if until < pool.starts_at:
        return range(0)
    return range(int((until - pool.starts_at).total_seconds()) // pool.period_s + 1)


def take_snapshots(ctx: ServerContext, pool: Pool, now: datetime) -> int:
    """Store the board of every period boundary passed and not stored yet; how many
    this call stored (another replica's are skipped)."""
    with ctx.db.read() as session:
        have = set(
            session.scalars(select(PoolSnapshot.period).where(PoolSnapshot.pool_id == pool.id))
        )
    missing = [p for p in due_periods(pool, now) if p not in have]
    if not missing:
        return 0
    stored = 0
    with ctx.db.write_connection() as conn:
        entries = entry_views(conn, pool.id)
        for period in missing:
            at = _boundary(pool, period)
            standing = standing_json(board(ctx, conn, pool, entries, at))
            made = conn.execute(
                ctx.db.insert(PoolSnapshot)
                .values(pool_id=pool.id, period=period, standing=standing, taken_at=at)
                .on_conflict_do_nothing(index_elements=["pool_id", "period"])
                .returning(PoolSnapshot.id)
            ).scalar()
            stored += made is not None
    return stored


def _close_joins(ctx: ServerContext, pool_id: int, now: datetime) -> int:
    with ctx.db.write_connection() as conn:
        done = conn.execute(
            update(Pool)
            .where(Pool.id == pool_id, Pool.joins_closed_at.is_(None))
            .values(joins_closed_at=now)
        )
    return done.rowcount or 0


def standing_cutoff(ctx: ServerContext, pool: Pool) -> datetime:
    """The final standing's cut-off on the pool board: the pool's end + the finalize
    grace."""
    return pool.ends_at + timedelta(seconds=ctx.settings.pool_finalize_grace_s)


def board_cutoff(ctx: ServerContext, pool: Pool) -> datetime:
    """When the pool board may be frozen as the final standing: its cut-off, and for a
    pool that committed to a held-out split (not revealed), its reveal deadline too."""
    cutoff = standing_cutoff(ctx, pool)
    if pool.final_sha256 is None:
        return cutoff
    return max(cutoff, reveal_deadline(ctx, pool))


def freeze(ctx: ServerContext, pool: Pool, now: datetime) -> int:
    """Freeze the final standing once the cut-off has passed (the pool board as of the
    cut-off: epochs ending by the pool's end, their tasks finalized by the end + the
    finalize grace; the same standing whichever tick, late or early, freezes it); 1
    when this call froze it."""
    cutoff = standing_cutoff(ctx, pool)
    if now < board_cutoff(ctx, pool) or pool.final_benchmark_id is not None:
        return 0
    with ctx.db.write_connection() as conn:
        standing = standing_json(board(ctx, conn, pool, entry_views(conn, pool.id), cutoff))
        # a reveal just now: the held-out split decides, not the board
        frozen = _store_final(ctx, conn, pool.id, standing, cutoff, now, board_only=True)
    if frozen:
        event(log, "pool.ended", pool=pool.id, entries=len(standing))
    return frozen


def _store_final(
    ctx: ServerContext,
    conn: Any,
    pool_id: int,
    standing: list[dict[str, Any]],
    cutoff: datetime,
    now: datetime,
    *,
    board_only: bool,
) -> int:
    """Store the final standing unless another tick did (1 when this call did);
    settlement waits for the cut-off + the dispute window. ``board_only``: not when the
    held-out split was revealed meanwhile."""
    where = [Pool.id == pool_id, Pool.ended_at.is_(None), Pool.status == "active"]
    if board_only:
        where.append(Pool.final_benchmark_id.is_(None))
    window = timedelta(seconds=ctx.settings.pool_dispute_window_s)
    done = conn.execute(
        update(Pool)
        .where(*where)
        .values(
            ended_at=now,
            standing_at=cutoff,
            final_standing=standing,
            settle_after=cutoff + window,
        )
    )
    return int(done.rowcount or 0)


def freeze_held_out(ctx: ServerContext, pool_id: int, now: datetime) -> int:
    """Freeze the held-out standing once its cut-off is known
    (``pool_final.held_out_cutoff``: every held-out task final, or the deadline); 1
    when this call froze it."""
    with ctx.db.write() as session:
        pool = session.get(Pool, pool_id, populate_existing=True)
        if pool is None or pool.ended_at is not None or pool.status != "active":
            return 0
        conn = session.connection()
        cutoff = held_out_cutoff(conn, pool, now)
        if cutoff is None:
            return 0
        entries = entry_views(conn, pool.id)
        standings, _ = held_out_standings(ctx, conn, pool, entries, cutoff)
        standing = standing_json(rows_of(standings, entries))
        frozen = _store_final(ctx, conn, pool.id, standing, cutoff, now, board_only=False)
    if frozen:
        event(log, "pool.ended", pool=pool_id, entries=len(standing), held_out=True)
    return frozen


def _standings(stored: list[dict[str, Any]]) -> list[Standing]:
    return [
        Standing(
            int(r["entry"]),
            float(r["score"]),
            float(r["ci_low"]),
            float(r["ci_high"]),
            int(r["n_samples"]),
            float(r["chance"]),
        )
        for r in stored
    ]


def _final_split(ctx: ServerContext, conn: Any, pool: Pool) -> dict[str, Any] | None:
    """The payout record's ``final_split`` (``pool_final.split_record``)."""
    if pool.final_sha256 is None:
        return None
    if pool.final_benchmark_id is None or pool.standing_at is None:
        deadline = reveal_deadline(ctx, pool).isoformat()
        return split_record(pool, None, f"not revealed by its deadline ({deadline})")
    _, counted = held_out_standings(ctx, conn, pool, entry_views(conn, pool.id), pool.standing_at)
    return split_record(pool, counted, None)


def settle(ctx: ServerContext, pool_id: int) -> int:
    """Pay out an ended pool whose dispute window has passed, exactly once (module
    docstring); 1 when this call settled it, 0 when there was nothing to do."""
    now = ctx.now()
    try:
        with ctx.db.write() as session:
            pg = ctx.db.dialect == "postgresql"
            pool = session.get(Pool, pool_id, with_for_update=pg, populate_existing=True)
            if (
                pool is None
                or pool.status != "active"
                or pool.final_standing is None
                or pool.ended_at is None
                or pool.settle_after is None
                or now < pool.settle_after
                or session.get(PoolPayout, pool_id) is not None
            ):
                return 0
            standings = _standings(pool.final_standing)
            rule = parse_rule(pool.rule, pool.rule_params)
            payouts = allocate(pool.funds, standings, rule, pool.ties)
            owners = dict(
                session.execute(
                    select(PoolEntry.id, PoolEntry.account_id).where(PoolEntry.pool_id == pool_id)
                ).all()
            )
            conn = session.connection()
            escrow = ledger.pool_holder(pool_id)
            paid = 0
            for payout in sorted(payouts, key=lambda p: owners[p.entry_id]):
                if payout.amount <= 0:
                    continue
                ledger.transfer(
                    conn,
                    source=escrow,
                    target=ledger.account_holder(owners[payout.entry_id]),
                    amount=payout.amount,
                    reason="payout",
                    now=now,
                    pool_id=pool_id,
                    memo=f"pool {pool_id}, place {payout.place}",
                )
                paid += payout.amount
            if paid < pool.funds:  # the rule paid nobody (or, never, not all): back to the funder
                ledger.transfer(
                    conn,
                    source=escrow,
                    target=ledger.account_holder(pool.funder_id),
                    amount=pool.funds - paid,
                    reason="refund",
                    now=now,
                    pool_id=pool_id,
                    memo=f"pool {pool_id}: not paid out by its rule",
                )
            display = {
                int(r["entry"]): {k: r[k] for k in ("model_id", "model_ref", "account") if k in r}
                for r in pool.final_standing
            }
            record = payout_record(
                pool_id,
                pool.funds,
                rule,
                pool.ties,
                standings,
                payouts,
                pool.ended_at.isoformat(),
                pool.title,
                display=display,
            )
            if pool.standing_at is not None:  # which finalized tasks the standing counts
                record["payout"]["standing_at"] = pool.standing_at.isoformat()
            split = _final_split(ctx, conn, pool)
            if split is not None:
                record["payout"]["final_split"] = split
            index = publiclog.append(ctx, conn, None, record, now)
            session.add(PoolPayout(pool_id=pool_id, record=record, log_index=index, settled_at=now))
            pool.status = "settled"
            pool.settled_at = now
            session.flush()
    except IntegrityError:  # another replica's payout row won: it settled
        return 0
    event(log, "pool.settled", pool=pool_id, paid=paid, log_index=index)
    return 1
