"""Prize pools: create (funds into escrow), join, cancel, the pool board (CONTRACT STUB).

A pool's score for an entry is the mean of its finalized per-sample consensus scores on
the pool's benchmarks over the pool's epochs (those that start at or after both the
pool's start and the entry's join, and end by the pool's end), counting per epoch only
the epoch's base draw (the sample ids every model of that epoch shares), so every entry
is scored on the same items each epoch; its interval is
``core/intervals.score_interval`` of that sum and count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from quorumbench.core.allocation import Payout, Standing
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext


@dataclass(frozen=True)
class PoolSpec:
    """What a funder gives to create a pool (validated by :func:`create_pool`)."""

    title: str
    funds: int
    rule: str
    starts_at: datetime
    ends_at: datetime
    join_deadline: datetime
    benchmarks: list[str]
    description: str = ""
    rule_params: dict[str, Any] = field(default_factory=dict)
    ties: str = "exact"
    max_params: int | None = None
    kinds: list[str] = field(default_factory=list)
    entries_per_account: int = 1
    period_s: int = 86_400
    final_sha256: str | None = None


@dataclass(frozen=True)
class PoolEntryView:
    id: int
    model_id: int
    model_name: str
    model_ref: str
    account_name: str
    joined_at: datetime


@dataclass(frozen=True)
class StandingRow:
    """One entry on the pool board, best first."""

    entry: PoolEntryView
    standing: Standing
    rank: int
    best: int
    worst: int


@dataclass(frozen=True)
class PoolView:
    id: int
    title: str
    description: str
    funder_name: str
    benchmarks: list[str]
    funds: int
    rule: str
    rule_params: dict[str, Any]
    ties: str
    starts_at: datetime
    ends_at: datetime
    join_deadline: datetime
    max_params: int | None
    kinds: list[str]
    entries_per_account: int
    period_s: int
    final_sha256: str | None
    final_url: str | None
    status: str
    phase: str
    """``upcoming`` | ``open`` (joins open) | ``running`` (joins closed) | ``ended``
    (standing frozen, awaiting settlement) | ``settled`` | ``cancelled``."""
    created_at: datetime
    settled_at: datetime | None
    cancelled_at: datetime | None
    cancel_reason: str | None
    n_entries: int


@dataclass(frozen=True)
class PoolDetail:
    pool: PoolView
    entries: list[PoolEntryView]
    board: list[StandingRow]
    """The current standing (the frozen final one once ended)."""
    payouts: list[Payout]
    """What the rule pays for ``board`` now (a preview before settlement; the paid
    amounts after)."""
    history: list[dict[str, Any]]
    """Snapshots, oldest first: ``{"period", "taken_at", "standing": [...]}``."""
    payout_record: dict[str, Any] | None
    """The settled record as logged, with its ``log_index`` (None before settlement)."""


def create_pool(ctx: ServerContext, principal: Principal, spec: PoolSpec) -> PoolView:
    raise NotImplementedError


def list_pools(ctx: ServerContext, *, phase: str | None = None) -> list[PoolView]:
    raise NotImplementedError


def get_pool(ctx: ServerContext, pool_id: int) -> PoolDetail:
    raise NotImplementedError


def join_pool(ctx: ServerContext, principal: Principal, pool_id: int, model: str) -> PoolEntryView:
    """Enter a model (its id, name or ref) the principal owns."""
    raise NotImplementedError


def cancel_pool(ctx: ServerContext, principal: Principal, pool_id: int, reason: str) -> PoolView:
    """An admin cancels a pool before settlement: the escrow goes back to the funder."""
    raise NotImplementedError


def reveal_final(ctx: ServerContext, principal: Principal, pool_id: int, url: str) -> PoolView:
    """The funder reveals the held-out final dataset's URL (its SHA-256 must match)."""
    raise NotImplementedError
