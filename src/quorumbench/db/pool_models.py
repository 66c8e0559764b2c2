"""ORM models of credits and prize pools (``services/ledger.py``, ``services/pools.py``).

Imported by ``db/__init__.py``, so they are on ``Base.metadata`` with the rest.

Credits are integers in minor units (no floats anywhere). The ledger is double-entry
and append-only: a transfer is one ``txn_id`` with two lines whose amounts sum to
zero. A holder's balance is the sum of its lines; ``ledger_balances`` keeps that sum
materialised (updated in the same transaction as the lines, with a guarded
``UPDATE … WHERE balance >= amount``, so two concurrent transfers cannot both spend
the same credits), and ``check_ledger`` recomputes it from the lines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base

ISSUANCE = "issuance"
"""The holder that minting debits: its balance is minus the credits ever minted (the
only holder that may go below zero)."""


class LedgerBalance(Base):
    """A holder's balance: ``account:<id>``, ``pool:<id>`` (a pool's escrow) or
    ``issuance``. Never negative except for ``issuance``."""

    __tablename__ = "ledger_balances"
    __table_args__ = (
        CheckConstraint(f"balance >= 0 OR holder = '{ISSUANCE}'", name="balance_not_negative"),
    )

    holder: Mapped[str] = mapped_column(String(64), primary_key=True)
    balance: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime]


class LedgerEntry(Base):
    """One line of a transfer (append-only: never updated or deleted)."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        Index("ix_ledger_entries_holder", "holder", "id"),
        Index("ix_ledger_entries_txn", "txn_id"),
        Index("ix_ledger_entries_pool", "pool_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    txn_id: Mapped[str] = mapped_column(String(32))
    """The transfer this line belongs to (random hex); its lines sum to zero."""
    holder: Mapped[str] = mapped_column(String(64))
    amount: Mapped[int] = mapped_column(BigInteger)
    """Signed: negative leaves the holder, positive reaches it."""
    balance_after: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(String(16))
    """``mint``, ``fund``, ``payout`` or ``refund``."""
    pool_id: Mapped[int | None] = mapped_column(Integer, default=None)
    memo: Mapped[str] = mapped_column(String(500), default="")
    created_by: Mapped[int | None] = mapped_column(Integer, default=None)
    """The account that made the transfer happen (the admin who minted, the funder);
    None for the scheduler's settlement."""
    created_at: Mapped[datetime]


class Pool(Base):
    """A prize pool: funds in escrow on benchmarks, paid out at the end by a rule."""

    __tablename__ = "pools"
    __table_args__ = (Index("ix_pools_status_ends", "status", "ends_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    funder_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    benchmarks: Mapped[list[Any]]
    """Benchmark names (active when the pool was created)."""
    funds: Mapped[int] = mapped_column(BigInteger)
    """Minor units moved into the pool's escrow at creation."""
    rule: Mapped[str] = mapped_column(String(32))
    rule_params: Mapped[dict[str, Any]]
    """The rule's parameters with defaults filled in (``core/allocation.parse_rule``)."""
    ties: Mapped[str] = mapped_column(String(16))
    """``exact`` or ``statistical``."""
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    join_deadline: Mapped[datetime]
    eligibility: Mapped[dict[str, Any]]
    """``{"max_params": int | None, "kinds": [..]}`` (kinds as plans name them)."""
    entries_per_account: Mapped[int] = mapped_column(Integer, default=1)
    period_s: Mapped[int] = mapped_column(Integer, default=86_400)
    """How often the pool board is snapshotted (seconds; the seed's 24 h)."""
    final_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    """The held-out final dataset's SHA-256, published at creation (None: no final split)."""
    final_url: Mapped[str | None] = mapped_column(String(2000), default=None)
    """Its URL, revealed by the funder at the end."""
    final_spec: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The revealed benchmark spec (``evaluation/spec.py``) of the held-out data: its
    ``data.url`` is ``final_url``, its ``data.sha256`` the commitment."""
    final_benchmark_id: Mapped[int | None] = mapped_column(Integer, default=None)
    """The hidden benchmark row the held-out tasks evaluate (never scheduled by epochs,
    never on the board)."""
    final_revealed_at: Mapped[datetime | None] = mapped_column(default=None)
    final_scheduled_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the held-out tasks were made (one per entry and part)."""
    final_deadline: Mapped[datetime | None] = mapped_column(default=None)
    """The held-out standing is frozen when every held-out task is final, or at this
    time on those final by then."""
    status: Mapped[str] = mapped_column(String(16))
    """``active`` (before settlement), ``settled`` or ``cancelled``; whether it is upcoming,
    open for joins, running or ended follows from the times."""
    joins_closed_at: Mapped[datetime | None] = mapped_column(default=None)
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the final standing was frozen."""
    final_standing: Mapped[list[Any] | None] = mapped_column(default=None)
    standing_at: Mapped[datetime | None] = mapped_column(default=None)
    """The final standing's cut-off: the end + the finalize grace (tasks finalized by
    then count; the standing is the same whenever a tick freezes it)."""
    settle_after: Mapped[datetime | None] = mapped_column(default=None)
    """The cut-off + the dispute window: settlement waits until then."""
    settled_at: Mapped[datetime | None] = mapped_column(default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(default=None)
    cancel_reason: Mapped[str | None] = mapped_column(String(500), default=None)
    created_at: Mapped[datetime]


class PoolEntry(Base):
    """A model entered in a pool by its owner. The same weights enter a pool once."""

    __tablename__ = "pool_entries"
    __table_args__ = (
        UniqueConstraint("pool_id", "weights_key"),
        UniqueConstraint("pool_id", "model_id"),
        Index("ix_pool_entries_account", "pool_id", "account_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    weights_key: Mapped[str] = mapped_column(String(600))
    """``sha256:<weights>`` when the weights are known, else ``ref:<ref>``."""
    joined_at: Mapped[datetime]


class PoolSnapshot(Base):
    """The pool board at one period boundary (one per period: replicas race, one wins)."""

    __tablename__ = "pool_snapshots"
    __table_args__ = (UniqueConstraint("pool_id", "period"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    period: Mapped[int] = mapped_column(Integer)
    """0 at the start, then one per ``period_s``."""
    standing: Mapped[list[Any]]
    taken_at: Mapped[datetime]


class PoolPayout(Base):
    """A pool's settlement: written once (the primary key is the pool)."""

    __tablename__ = "pool_payouts"

    pool_id: Mapped[int] = mapped_column(
        ForeignKey("pools.id", ondelete="CASCADE"), primary_key=True
    )
    record: Mapped[dict[str, Any]]
    """What the public log holds: standing, rule, parameters, ties, funds, amounts."""
    log_index: Mapped[int] = mapped_column(Integer)
    settled_at: Mapped[datetime]
