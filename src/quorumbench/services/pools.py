"""Prize pools: create (funds into escrow), join, cancel, reveal, read.

A funder (any signed-in account whose token may register models: the
``model:register`` scope, which every default token carries) creates a pool; its
funds move from the funder's account to the pool's escrow in the transaction that
inserts the pool, so a pool exists exactly when it is funded. Trainers enter models
they own until the join deadline; the same weights (by weights hash, else by ref)
enter a pool once under any account. The scheduler's tick (``services/pool_ticks.py``)
snapshots the board, closes joins, freezes the final standing and settles; an admin
may cancel a pool before it settles, which refunds the escrow.

A pool's score for an entry is the mean of its finalized per-sample consensus scores on
the pool's benchmarks over the pool's epochs (those that start at or after both the
pool's start and the entry's join, and end by the pool's end), counting per epoch only
the epoch's base draw (the sample ids every model of that epoch shares), so every entry
is scored on the same items each epoch; its interval is
``core/intervals.score_interval`` of that sum and count (``services/pool_board.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.core.allocation import Payout, allocate, parse_rule
from quorumbench.db.models import Account, Model
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.db.pool_models import Pool, PoolEntry, PoolPayout, PoolSnapshot
from quorumbench.errors import (
    ConflictError,
    DuplicateEntryError,
    InvalidSpecError,
    NotFoundError,
    PermissionDeniedError,
    UnknownBenchmarkError,
)
from quorumbench.services import ledger
from quorumbench.services.accounts import Principal
from quorumbench.services.ask_cache import _kind as model_kind
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import model_size
from quorumbench.services.pool_board import (
    PoolEntryView,
    StandingRow,
    board,
    entry_views,
    rows_from_json,
)
from quorumbench.services.pool_final import FinalProgress, final_state, progress, reveal
from quorumbench.services.pool_spec import PoolSpec, checked

__all__ = [
    "PHASES",
    "PoolDetail",
    "PoolEntryView",
    "PoolSpec",
    "PoolView",
    "StandingRow",
    "cancel_pool",
    "create_pool",
    "get_pool",
    "join_pool",
    "list_pools",
    "reveal_final",
]

SCOPE = "model:register"
"""What a token needs to fund a pool or enter a model: the scope of registering models
(every default token has it), so any signed-in account may fund or join."""
PHASES = ("upcoming", "open", "running", "ended", "settled", "cancelled")


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
    final_state: str
    """The held-out split's state (``services/pool_final.STATES``): ``none``,
    ``awaiting_reveal``, ``evaluating``, ``frozen`` or ``not_revealed``."""
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
    final: FinalProgress
    """The held-out split's progress (``services/pool_final.py``)."""


# --- views ------------------------------------------------------------------------


def phase_of(pool: Pool, now: datetime) -> str:
    """Where a pool stands (:data:`PHASES`): joins are open from creation until the
    join deadline, whether or not the pool has started."""
    if pool.status != "active":
        return str(pool.status)
    if pool.ended_at is not None or now >= pool.ends_at:
        return "ended"
    if now < pool.starts_at:
        return "upcoming"
    if pool.joins_closed_at is None and now < pool.join_deadline:
        return "open"
    return "running"


def joins_open(pool: Pool, now: datetime) -> bool:
    return pool.status == "active" and pool.joins_closed_at is None and now < pool.join_deadline


def _view(ctx: ServerContext, pool: Pool, funder: str, n_entries: int, now: datetime) -> PoolView:
    return PoolView(
        id=pool.id,
        title=pool.title,
        description=pool.description,
        funder_name=funder,
        benchmarks=list(pool.benchmarks),
        funds=pool.funds,
        rule=pool.rule,
        rule_params=dict(pool.rule_params),
        ties=pool.ties,
        starts_at=pool.starts_at,
        ends_at=pool.ends_at,
        join_deadline=pool.join_deadline,
        max_params=pool.eligibility.get("max_params"),
        kinds=list(pool.eligibility.get("kinds", [])),
        entries_per_account=pool.entries_per_account,
        period_s=pool.period_s,
        final_sha256=pool.final_sha256,
        final_url=pool.final_url,
        final_state=final_state(ctx, pool, now),
        status=pool.status,
        phase=phase_of(pool, now),
        created_at=pool.created_at,
        settled_at=pool.settled_at,
        cancelled_at=pool.cancelled_at,
        cancel_reason=pool.cancel_reason,
        n_entries=n_entries,
    )


def _pool_view(ctx: ServerContext, session: Session, pool: Pool, now: datetime) -> PoolView:
    funder = session.scalar(select(Account.name).where(Account.id == pool.funder_id)) or ""
    n = session.scalar(select(func.count()).where(PoolEntry.pool_id == pool.id)) or 0
    return _view(ctx, pool, funder, int(n), now)


def _get(session: Session, pool_id: int, *, lock: bool = False) -> Pool:
    pool = session.get(Pool, pool_id, with_for_update=lock and _is_pg(session))
    if pool is None:
        raise NotFoundError(f"no pool {pool_id}")
    return pool


def _is_pg(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


# --- creating ---------------------------------------------------------------------


def create_pool(
    ctx: ServerContext,
    principal: Principal,
    spec: PoolSpec,
    *,
    record: Callable[[Session, int], None] | None = None,
) -> PoolView:
    """Create a pool and move its funds from the funder's account into its escrow, in one
    transaction: refused (InvalidSpecError, UnknownBenchmarkError,
    InsufficientFundsError) with nothing written. ``record(session, pool_id)`` runs in
    that transaction (the site's form records its one-time nonce there:
    ``services/web_pools.py``)."""
    principal.require(SCOPE)
    now = ctx.now()
    title, description, rule, names, kinds = checked(spec, now)
    with ctx.db.write() as session:
        active = set(
            session.scalars(
                select(BenchmarkRow.name).where(BenchmarkRow.name.in_(names), BenchmarkRow.active)
            )
        )
        missing = [n for n in names if n not in active]
        if missing:
            raise UnknownBenchmarkError(
                f"no active benchmark {', '.join(map(repr, missing))} on this server "
                "(GET /v0/benchmarks lists them; POST /v0/benchmarks creates one)"
            )
        pool = Pool(
            funder_id=principal.account_id,
            title=title,
            description=description,
            benchmarks=names,
            funds=spec.funds,
            rule=rule.name,
            rule_params=rule.as_dict(),
            ties=spec.ties,
            starts_at=spec.starts_at,
            ends_at=spec.ends_at,
            join_deadline=spec.join_deadline,
            eligibility={"max_params": spec.max_params, "kinds": kinds},
            entries_per_account=spec.entries_per_account,
            period_s=spec.period_s,
            final_sha256=spec.final_sha256,
            status="active",
            created_at=now,
        )
        session.add(pool)
        session.flush()
        if record is not None:  # before the funds move: a concurrent twin stops here
            record(session, pool.id)
        try:
            ledger.transfer(
                session.connection(),
                source=ledger.account_holder(principal.account_id),
                target=ledger.pool_holder(pool.id),
                amount=spec.funds,
                reason="fund",
                now=now,
                pool_id=pool.id,
                memo=f"funds of pool {pool.id}",
                by=principal.account_id,
            )
        except ValueError as exc:  # an amount the ledger refuses (too large)
            raise InvalidSpecError(f"funds: {exc}") from exc
        return _view(ctx, pool, principal.name, 0, now)


# --- reading ----------------------------------------------------------------------


def list_pools(ctx: ServerContext, *, phase: str | None = None) -> list[PoolView]:
    """Every pool (newest first), or those in ``phase``."""
    if phase is not None and phase not in PHASES:
        raise InvalidSpecError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    now = ctx.now()
    with ctx.db.read() as session:
        counts = dict(
            session.execute(
                select(PoolEntry.pool_id, func.count()).group_by(PoolEntry.pool_id)
            ).all()
        )
        rows = session.execute(
            select(Pool, Account.name)
            .join(Account, Account.id == Pool.funder_id)
            .order_by(Pool.id.desc())
        ).all()
    views = [_view(ctx, pool, name, int(counts.get(pool.id, 0)), now) for pool, name in rows]
    return [v for v in views if phase is None or v.phase == phase]


def preview(pool: Pool, rows: list[StandingRow]) -> list[Payout]:
    """What the rule would pay for ``rows`` now (nothing for a cancelled pool)."""
    if pool.status == "cancelled" or not rows:
        return []
    return allocate(
        pool.funds,
        [r.standing for r in rows],
        parse_rule(pool.rule, pool.rule_params),
        pool.ties,
    )


def _paid(record: dict[str, Any]) -> list[Payout]:
    return [
        Payout(a["entry"], a["place"], a["group"], a["amount"]) for a in record["payout"]["amounts"]
    ]


def get_pool(ctx: ServerContext, pool_id: int) -> PoolDetail:
    """A pool with its entries, its board (the frozen final standing once ended), the
    payouts (a preview before settlement), its snapshots and its payout record."""
    now = ctx.now()
    with ctx.db.read() as session:
        pool = _get(session, pool_id)
        view = _pool_view(ctx, session, pool, now)
        entries = entry_views(session, pool.id)
        final = progress(ctx, session, pool, now)
        if pool.final_standing is not None:
            rows = rows_from_json(pool.final_standing, entries)
        else:
            rows = board(ctx, session, pool, entries, now)
        snapshots = session.scalars(
            select(PoolSnapshot)
            .where(PoolSnapshot.pool_id == pool.id)
            .order_by(PoolSnapshot.period)
        ).all()
        paid = session.get(PoolPayout, pool.id)
    history = [
        {"period": s.period, "taken_at": s.taken_at, "standing": s.standing} for s in snapshots
    ]
    record = None if paid is None else {**paid.record, "log_index": paid.log_index}
    payouts = _paid(paid.record) if paid is not None else preview(pool, rows)
    return PoolDetail(view, entries, rows, payouts, history, record, final)


# --- joining ----------------------------------------------------------------------


def _find_model(session: Session, principal: Principal, model: str) -> Model:
    """The model ``model`` names: its id, its ref, or the name of one of the caller's."""
    text = model.strip()
    found = session.get(Model, int(text)) if text.isdigit() else None
    if found is None:
        found = session.scalars(select(Model).where(Model.ref == text)).first()
    if found is None:
        named = session.scalars(
            select(Model)
            .where(Model.name == text, Model.owner_id == principal.account_id)
            .order_by(Model.id)
        ).all()
        if len(named) > 1:
            raise ConflictError(
                f"you have {len(named)} models named {text!r}: give its id or ref instead"
            )
        found = named[0] if named else None
    if found is None:
        raise NotFoundError(f"no model {text!r}")
    return found


def _check_eligible(pool: Pool, model: Model) -> None:
    kinds = pool.eligibility.get("kinds") or []
    kind = model_kind(model.ref, model.details)
    if kinds and kind not in kinds:
        raise ConflictError(
            f"model {model.ref} is of kind {kind!r}; this pool takes {', '.join(kinds)}"
        )
    limit = pool.eligibility.get("max_params")
    if limit is not None:
        size = model_size(model.params, model.details).effective_params
        if size is None:
            raise ConflictError(
                f"model {model.ref} has no known parameter count; this pool takes models of "
                f"at most {limit:,} parameters"
            )
        if size > limit:
            raise ConflictError(
                f"model {model.ref} has {size:,} parameters; this pool takes at most {limit:,}"
            )


def weights_key(model: Model) -> str:
    """What makes two entries the same weights: their hash, else their ref."""
    if model.weights_sha256:
        return f"sha256:{model.weights_sha256}"
    return f"ref:{model.ref}"


def join_pool(ctx: ServerContext, principal: Principal, pool_id: int, model: str) -> PoolEntryView:
    """Enter a model (its id, name or ref) the principal owns."""
    principal.require(SCOPE)
    now = ctx.now()
    try:
        with ctx.db.write() as session:
            pool = _get(session, pool_id, lock=True)  # entries per account: one at a time
            if pool.status != "active":
                raise ConflictError(f"pool {pool_id} is {pool.status}: it takes no entries")
            if not joins_open(pool, now):
                raise ConflictError(
                    f"entries to pool {pool_id} closed at its join deadline "
                    f"({pool.join_deadline.isoformat()})"
                )
            found = _find_model(session, principal, model)
            if found.owner_id != principal.account_id:
                raise PermissionDeniedError(
                    f"model {found.ref} is not yours: only its owner may enter it"
                )
            if found.retired_at is not None:
                raise ConflictError(f"model {found.ref} is retired")
            _check_eligible(pool, found)
            key = weights_key(found)
            same = session.scalars(
                select(PoolEntry.id).where(
                    PoolEntry.pool_id == pool.id,
                    (PoolEntry.model_id == found.id) | (PoolEntry.weights_key == key),
                )
            ).first()
            if same is not None:
                raise DuplicateEntryError(
                    f"model {found.ref} (or the same weights) is in pool {pool_id} already"
                )
            mine = session.scalar(
                select(func.count()).where(
                    PoolEntry.pool_id == pool.id, PoolEntry.account_id == principal.account_id
                )
            )
            if (mine or 0) >= pool.entries_per_account:
                raise ConflictError(
                    f"pool {pool_id} takes {pool.entries_per_account} entr"
                    f"{'y' if pool.entries_per_account == 1 else 'ies'} per account; "
                    f"yours has {mine}"
                )
            entry = PoolEntry(
                pool_id=pool.id,
                model_id=found.id,
                account_id=principal.account_id,
                weights_key=key,
                joined_at=now,
            )
            session.add(entry)
            session.flush()
            return PoolEntryView(entry.id, found.id, found.name, found.ref, principal.name, now)
    except IntegrityError as exc:  # a concurrent entry of the same weights won
        raise DuplicateEntryError(
            f"model {model!r} (or the same weights) is in pool {pool_id} already"
        ) from exc


# --- cancelling and revealing -----------------------------------------------------


def cancel_pool(ctx: ServerContext, principal: Principal, pool_id: int, reason: str) -> PoolView:
    """An admin cancels a pool before settlement: the escrow goes back to the funder."""
    if not principal.acts_as_admin:
        raise PermissionDeniedError("only an admin (with the admin scope) may cancel a pool")
    why = reason.strip() if isinstance(reason, str) else ""
    if not 1 <= len(why) <= 500:
        raise InvalidSpecError("a cancellation gives its reason (1 to 500 characters)")
    now = ctx.now()
    with ctx.db.write() as session:
        pool = _get(session, pool_id, lock=True)
        if pool.status != "active":
            raise ConflictError(f"pool {pool_id} is {pool.status} already: nothing to cancel")
        ledger.transfer(
            session.connection(),
            source=ledger.pool_holder(pool.id),
            target=ledger.account_holder(pool.funder_id),
            amount=pool.funds,
            reason="refund",
            now=now,
            pool_id=pool.id,
            memo=f"pool {pool.id} cancelled: {why}"[:500],
            by=principal.account_id,
        )
        pool.status = "cancelled"
        pool.cancelled_at = now
        pool.cancel_reason = why
        session.flush()
        return _pool_view(ctx, session, pool, now)


def reveal_final(ctx: ServerContext, principal: Principal, pool_id: int, spec: object) -> PoolView:
    """The funder reveals the held-out final dataset as a benchmark spec once the pool
    has ended (``services/pool_final.reveal``): the server fetches it, checks it hashes
    to the commitment, and the runners evaluate every entry on it."""
    principal.require(SCOPE)
    reveal(ctx, principal.account_id, pool_id, spec)
    with ctx.db.read() as session:
        return _pool_view(ctx, session, _get(session, pool_id), ctx.now())
