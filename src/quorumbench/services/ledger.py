"""Credits: a double-entry, append-only ledger in integer minor units.

Holders: ``account:<id>``, ``pool:<id>`` (a pool's escrow), ``issuance`` (minting's
counterparty). See ``db/pool_models.py``.

A transfer is one ``txn_id`` with two lines (``-amount`` from the source,
``+amount`` to the target) and the two balance rows changed in the same
transaction. Concurrency: the balance rows a transfer touches are locked in one
fixed order (sorted by holder; ``SELECT … FOR UPDATE`` on PostgreSQL, the write
transaction holds the database on SQLite), the source's balance is checked under
that lock, and the debit is a guarded ``UPDATE … WHERE balance >= amount`` besides:
two concurrent transfers cannot both spend the same credits, and two transfers in
opposite directions cannot deadlock.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from quorumbench.db.models import Account
from quorumbench.db.pool_models import ISSUANCE, LedgerBalance, LedgerEntry
from quorumbench.errors import InsufficientFundsError, NotFoundError, PermissionDeniedError
from quorumbench.services.context import ServerContext

REASONS = frozenset({"mint", "fund", "payout", "refund"})
"""Why credits move: an admin minted them, a funder funded a pool, a pool paid a
winner, a cancelled pool refunded its funder."""
MAX_AMOUNT = 10**15
"""The largest amount one transfer moves (minor units): far below BIGINT's range, so
no sum of balances overflows it."""
MAX_MEMO = 500

_BALANCES = cast(Table, LedgerBalance.__table__)
_ENTRIES = cast(Table, LedgerEntry.__table__)


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


def check_amount(amount: object) -> int:
    """``amount`` if it is a whole number of minor units above zero (``bool`` is not);
    ``ValueError`` saying what is wrong otherwise."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError(f"an amount is a whole number of minor units (an integer), not {amount!r}")
    if amount <= 0:
        raise ValueError(f"an amount must be above zero, not {amount}")
    if amount > MAX_AMOUNT:
        raise ValueError(f"an amount is at most {MAX_AMOUNT} minor units, not {amount}")
    return amount


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
    less, and nothing is written.

    The caller's transaction must be a write transaction (``ctx.db.write_connection()``
    or ``ctx.db.write()``'s connection); several transfers in one transaction are fine
    as long as every transaction takes its holders in the same order.
    """
    check_amount(amount)
    if reason not in REASONS:
        raise ValueError(f"unknown ledger reason {reason!r} (one of {sorted(REASONS)})")
    if source == target:
        raise ValueError(f"a transfer needs two holders, not {source!r} twice")
    if len(memo) > MAX_MEMO:
        raise ValueError(f"a memo is at most {MAX_MEMO} characters")
    held = _lock_balances(conn, sorted((source, target)))
    if source != ISSUANCE and held.get(source, 0) < amount:
        raise InsufficientFundsError(
            f"{source} holds {held.get(source, 0)} (minor units), less than the {amount} "
            "to move: nothing moved"
        )
    for holder in sorted((source, target)):
        if holder not in held:
            _ensure_balance(conn, holder, now)
    debit = (
        update(_BALANCES)
        .where(
            _BALANCES.c.holder == source,
            or_(_BALANCES.c.balance >= amount, _BALANCES.c.holder == ISSUANCE),
        )
        .values(balance=_BALANCES.c.balance - amount, updated_at=now)
        .returning(_BALANCES.c.balance)
    )
    source_after = conn.execute(debit).scalar_one_or_none()
    if source_after is None:  # the lock above makes this unreachable; kept as a guard
        raise InsufficientFundsError(f"{source} holds less than {amount}: nothing moved")
    credit = (
        update(_BALANCES)
        .where(_BALANCES.c.holder == target)
        .values(balance=_BALANCES.c.balance + amount, updated_at=now)
        .returning(_BALANCES.c.balance)
    )
    target_after = conn.execute(credit).scalar_one()
    txn_id = secrets.token_hex(16)
    common = {
        "txn_id": txn_id,
        "reason": reason,
        "pool_id": pool_id,
        "memo": memo,
        "created_by": by,
        "created_at": now,
    }
    conn.execute(
        _ENTRIES.insert(),
        [
            {**common, "holder": source, "amount": -amount, "balance_after": source_after},
            {**common, "holder": target, "amount": amount, "balance_after": target_after},
        ],
    )
    return txn_id


def _lock_balances(conn: Connection, holders: list[str]) -> dict[str, int]:
    """The balances of the ``holders`` that have a row, locked in the given order."""
    held: dict[str, int] = {}
    for holder in holders:
        query = select(_BALANCES.c.balance).where(_BALANCES.c.holder == holder)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        found = conn.execute(query).scalar_one_or_none()
        if found is not None:
            held[holder] = int(found)
    return held


def _ensure_balance(conn: Connection, holder: str, now: datetime) -> None:
    """Make ``holder``'s balance row (zero) unless it exists (a concurrent maker wins)."""
    dialect_insert: Any = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = dialect_insert(_BALANCES).values(holder=holder, balance=0, updated_at=now)
    conn.execute(statement.on_conflict_do_nothing(index_elements=["holder"]))


def mint(
    ctx: ServerContext,
    *,
    admin_id: int,
    account_name: str,
    amount: int,
    memo: str,
    record: Callable[[Session, int], None] | None = None,
) -> LedgerLine:
    """An admin mints credits to an account (its own transaction): the account's line.
    ``record(session, line_id)`` runs in that transaction (the API's idempotency key).

    Minting debits ``issuance``; nothing here settles with a payment system (a payment
    provider's webhook would call this with a memo naming the payment)."""
    check_amount(amount)
    with ctx.db.write() as session:
        admin = session.get(Account, admin_id)
        if admin is None or not admin.is_admin:
            raise PermissionDeniedError("only an admin account may mint credits")
        account = session.scalar(select(Account).where(Account.name == account_name))
        if account is None:
            raise NotFoundError(f"no account named {account_name!r}")
        holder = account_holder(account.id)
        conn = session.connection()
        txn_id = transfer(
            conn,
            source=ISSUANCE,
            target=holder,
            amount=amount,
            reason="mint",
            now=ctx.now(),
            memo=memo,
            by=admin_id,
        )
        row = conn.execute(
            select(_ENTRIES).where(_ENTRIES.c.txn_id == txn_id, _ENTRIES.c.holder == holder)
        ).one()
        if record is not None:
            record(session, int(row.id))
        return _line(row._mapping)


def line(ctx: ServerContext, line_id: int) -> LedgerLine:
    """One ledger line by its id."""
    with ctx.db.read_connection() as conn:
        row = conn.execute(select(_ENTRIES).where(_ENTRIES.c.id == line_id)).one_or_none()
    if row is None:
        raise NotFoundError(f"no ledger line {line_id}")
    return _line(row._mapping)


def balance(ctx: ServerContext, holder: str) -> int:
    """``holder``'s balance (0 when it never held credits)."""
    with ctx.db.read_connection() as conn:
        found = conn.execute(
            select(_BALANCES.c.balance).where(_BALANCES.c.holder == holder)
        ).scalar_one_or_none()
    return int(found or 0)


def statement(
    ctx: ServerContext, holder: str, *, limit: int = 50, before_id: int | None = None
) -> list[LedgerLine]:
    """The holder's lines, newest first (keyset paging by id)."""
    query = select(_ENTRIES).where(_ENTRIES.c.holder == holder)
    if before_id is not None:
        query = query.where(_ENTRIES.c.id < before_id)
    query = query.order_by(_ENTRIES.c.id.desc()).limit(max(0, limit))
    with ctx.db.read_connection() as conn:
        return [_line(row._mapping) for row in conn.execute(query)]


def check_ledger(ctx: ServerContext) -> list[str]:
    """Invariant violations (none is []): every transfer sums to zero, every balance is
    the sum of its lines, none negative but issuance's."""
    problems: list[str] = []
    with ctx.db.read_connection() as conn:
        if conn.dialect.name == "postgresql":  # one snapshot for the three reads
            conn.execution_options(isolation_level="REPEATABLE READ")
        unbalanced = conn.execute(
            select(_ENTRIES.c.txn_id, func.sum(_ENTRIES.c.amount), func.count())
            .group_by(_ENTRIES.c.txn_id)
            .having(or_(func.sum(_ENTRIES.c.amount) != 0, func.count() < 2))
            .order_by(_ENTRIES.c.txn_id)
        ).all()
        sums = dict(
            conn.execute(
                select(_ENTRIES.c.holder, func.sum(_ENTRIES.c.amount)).group_by(_ENTRIES.c.holder)
            ).all()
        )
        balances = dict(conn.execute(select(_BALANCES.c.holder, _BALANCES.c.balance)).all())
    for txn_id, total, lines in unbalanced:
        problems.append(f"transfer {txn_id}: its {lines} line(s) sum to {total}, not 0")
    for holder in sorted(set(sums) | set(balances)):
        lines_sum = int(sums.get(holder) or 0)
        held = int(balances.get(holder, 0))
        if lines_sum != held:
            problems.append(f"{holder}: balance {held} but its lines sum to {lines_sum}")
        if held < 0 and holder != ISSUANCE:
            problems.append(f"{holder}: negative balance {held}")
    return problems


def _line(row: Any) -> LedgerLine:
    return LedgerLine(
        id=int(row["id"]),
        txn_id=row["txn_id"],
        holder=row["holder"],
        amount=int(row["amount"]),
        balance_after=int(row["balance_after"]),
        reason=row["reason"],
        pool_id=row["pool_id"],
        memo=row["memo"],
        created_by=row["created_by"],
        created_at=row["created_at"],
    )
