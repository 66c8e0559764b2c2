"""Credits: your balance and statement, minting (admin), the ledger's invariants (admin)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Response, status

from quorumbench.api.deps import Context, CurrentPrincipal, Writer
from quorumbench.api.ledger_schemas import LedgerCheckOut, LedgerLineOut, LedgerMeOut, MintIn
from quorumbench.api.params import IdempotencyKeyHeader
from quorumbench.errors import PermissionDeniedError
from quorumbench.services import idempotency, ledger

router = APIRouter(prefix="/v0/ledger", tags=["ledger"])

MAX_PAGE = 200
MAX_LINE_ID = 2**63 - 1


@router.get("/me", response_model=LedgerMeOut)
def my_ledger(
    ctx: Context,
    principal: CurrentPrincipal,
    before: int | None = Query(
        None, ge=1, le=MAX_LINE_ID, description="Only lines older than this line id."
    ),
    limit: int = Query(50, ge=1, le=MAX_PAGE),
) -> LedgerMeOut:
    """Your balance (minor units) and your lines, newest first (keyset paging)."""
    holder = ledger.account_holder(principal.account_id)
    lines = ledger.statement(ctx, holder, limit=limit, before_id=before)
    return LedgerMeOut(
        holder=holder,
        balance=ledger.balance(ctx, holder),
        entries=[LedgerLineOut.model_validate(line) for line in lines],
        next_before=lines[-1].id if len(lines) == limit else None,
    )


@router.post("/mint", response_model=LedgerLineOut, status_code=status.HTTP_201_CREATED)
def mint(
    body: MintIn,
    ctx: Context,
    principal: Writer,
    response: Response,
    idempotency_key: IdempotencyKeyHeader = None,
) -> LedgerLineOut:
    """Mint credits to an account (admin only): the account's line. Settling with a
    payment system is outside QuorumBench. With an ``Idempotency-Key``, a retry of the
    same request answers the first one's line (``Idempotent-Replayed: true``) and mints
    nothing; the key with another request is 422."""
    if not principal.acts_as_admin:
        raise PermissionDeniedError("minting credits needs the 'admin' scope")
    found = idempotency.claim(
        principal.account_id, "ledger:mint", idempotency_key, body.model_dump(mode="json")
    )
    done = idempotency.once(
        ctx,
        found,
        lambda record: ledger.mint(
            ctx,
            admin_id=principal.account_id,
            account_name=body.account,
            amount=body.amount,
            memo=body.memo,
            record=record,
        ),
    )
    if done.made is not None:
        return LedgerLineOut.model_validate(done.made)
    assert done.earlier is not None
    response.headers[idempotency.REPLAYED_HEADER] = "true"
    return LedgerLineOut.model_validate(ledger.line(ctx, done.earlier))


@router.get("/check", response_model=LedgerCheckOut)
def check(ctx: Context, principal: CurrentPrincipal) -> LedgerCheckOut:
    """The ledger's invariant violations (admin only): none is an empty list."""
    if not principal.acts_as_admin:
        raise PermissionDeniedError("checking the ledger needs the 'admin' scope")
    return LedgerCheckOut(problems=ledger.check_ledger(ctx))
