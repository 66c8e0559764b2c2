"""Credits: a double-entry, append-only ledger in integer minor units (CONTRACT STUB).

Holders: ``account:<id>``, ``pool:<id>`` (a pool's escrow), ``issuance`` (minting's
counterparty). See ``db/pool_models.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from quorumbench.services.context import ServerContext


def account_holder(account_id: int) -> str:
    return f"account:{account_id}"


def pool_holder(pool_id: int) -> str:
    return f"pool:{pool_id}"


@dataclass(frozen=True)
class LedgerLine:
    id: int
    txn_id: str
    holder: str
    amount: int
    balance_after: int
    reason: str
    pool_id: int | None
    memo: str
    created_by: int | None
    created_at: datetime


def transfer(
    conn: Connection,
    *,
    source: str,
    target: str,
    amount: int,
    reason: str,
    now: datetime,
    pool_id: int | None = None,
    memo: str = "",
    by: int | None = None,
) -> str:
    """Move ``amount`` (> 0) from ``source`` to ``target`` in the caller's transaction;
    the transfer's id. ``InsufficientFundsError`` when ``source`` (not issuance) holds
    less, and nothing is written."""
    raise NotImplementedError


def mint(
    ctx: ServerContext, *, admin_id: int, account_name: str, amount: int, memo: str
) -> LedgerLine:
    """An admin mints credits to an account (its own transaction): the account's line."""
    raise NotImplementedError


def balance(ctx: ServerContext, holder: str) -> int:
    raise NotImplementedError


def statement(
    ctx: ServerContext, holder: str, *, limit: int = 50, before_id: int | None = None
) -> list[LedgerLine]:
    """The holder's lines, newest first (keyset paging by id)."""
    raise NotImplementedError


def check_ledger(ctx: ServerContext) -> list[str]:
    """Invariant violations (none is []): every transfer sums to zero, every balance is
    the sum of its lines, none negative but issuance's."""
    raise NotImplementedError
