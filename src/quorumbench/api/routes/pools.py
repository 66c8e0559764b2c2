"""Prize pools: list, create (funds into escrow), show, join, cancel (admin), reveal the
held-out final dataset (``services/pools.py``). Amounts are integers in minor units."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from quorumbench.api.deps import Context, Writer
from quorumbench.api.params import IdempotencyKeyHeader, RowId
from quorumbench.api.pool_schemas import (
    CancelIn,
    FinalProgressOut,
    JoinIn,
    PayoutOut,
    Phase,
    PoolDetailOut,
    PoolEntryOut,
    PoolIn,
    PoolOut,
    RevealIn,
    StandingRowOut,
)
from quorumbench.errors import PermissionDeniedError
from quorumbench.services import idempotency, pools
from quorumbench.services.pools import PoolEntryView, PoolSpec, PoolView, StandingRow

router = APIRouter(prefix="/v0/pools", tags=["pools"])
SCOPE = "model:register"
"""The scope that funding and joining need: the one registering a model needs (a
trainer's and a funder's default token holds it)."""
_CREATED: dict[int | str, dict[str, Any]] = {
    201: {
        "description": "The pool, funded: its funds are in its escrow.",
        "headers": {
            "Location": {
                "description": "The pool's URL (``/v0/pools/{pool_id}``).",
                "required": True,
                "schema": {"type": "string"},
            },
            "Idempotent-Replayed": {
                "description": "``true`` when an earlier request with the same "
                "``Idempotency-Key`` made this pool (nothing was done again).",
                "schema": {"type": "string"},
            },
        },
    }
}


def verify_text(pool: PoolView, record: dict[str, Any] | None) -> str:
    """How anyone recomputes the pool's payouts (the page and the CLI show it)."""
    final = (
        f" The final standing is computed on the held-out dataset whose SHA-256 is "
        f"{pool.final_sha256}"
        + (f", revealed at {pool.final_url}" if pool.final_url else ", not revealed yet")
        + ": download it and check its hash (sha256sum)."
        if pool.final_sha256
        else ""
    )
    where = (
        f"The payout record is entry {record['log_index']} of the public log."
        if record is not None and "log_index" in record
        else "At settlement the payout record (standing, rule, parameters, amounts) is "
        "appended to the public log."
    )
    return (
        f"{where} Run `quorumbench verify --server <this server>`: it recomputes every "
        f"payout from the logged standing and the rule {pool.rule} "
        f"({', '.join(f'{k}={v}' for k, v in sorted(pool.rule_params.items())) or 'defaults'}"
        f", ties {pool.ties}) and checks the amounts sum to the funds.{final}"
    )


def pool_out(pool: PoolView) -> PoolOut:
    return PoolOut(
        id=pool.id,
        title=pool.title,
        description=pool.description,
        funder=pool.funder_name,
        benchmarks=list(pool.benchmarks),
        funds=pool.funds,
        rule=pool.rule,
        rule_params=dict(pool.rule_params),
        ties=pool.ties,
        starts_at=pool.starts_at,
        ends_at=pool.ends_at,
        join_deadline=pool.join_deadline,
        max_params=pool.max_params,
        kinds=list(pool.kinds),
        entries_per_account=pool.entries_per_account,
        period_s=pool.period_s,
        final_sha256=pool.final_sha256,
        final_url=pool.final_url,
        final_state=pool.final_state,
        status=pool.status,
        phase=pool.phase,
        created_at=pool.created_at,
        settled_at=pool.settled_at,
        cancelled_at=pool.cancelled_at,
        cancel_reason=pool.cancel_reason,
        n_entries=pool.n_entries,
        url=f"/pools/{pool.id}",
    )


def entry_out(entry: PoolEntryView) -> PoolEntryOut:
    return PoolEntryOut(
        id=entry.id,
        model_id=entry.model_id,
        model=entry.model_name,
        ref=entry.model_ref,
        account=entry.account_name,
        joined_at=entry.joined_at,
    )


def row_out(row: StandingRow) -> StandingRowOut:
    return StandingRowOut(
        entry=entry_out(row.entry),
        rank=row.rank,
        rank_best=row.best,
        rank_worst=row.worst,
        score=row.standing.score,
        ci_low=row.standing.ci_low,
        ci_high=row.standing.ci_high,
        n_samples=row.standing.n_samples,
        chance=row.standing.chance,
    )


@router.get("", response_model=list[PoolOut])
def list_pools(
    ctx: Context,
    phase: Annotated[Phase | None, Query(description="Only pools in this phase.")] = None,
) -> list[PoolOut]:
    """Every pool, or those in one phase: funds, rule, times, entries."""
    return [pool_out(p) for p in pools.list_pools(ctx, phase=phase)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=PoolOut,
    responses=_CREATED,
)
def create_pool(
    body: PoolIn,
    ctx: Context,
    principal: Writer,
    response: Response,
    idempotency_key: IdempotencyKeyHeader = None,
) -> PoolOut:
    """Create a pool (needs the ``model:register`` scope): its funds move from your
    balance into the pool's escrow in the same transaction. Funds above your balance
    are 409 ``insufficient-funds``; an unknown benchmark, bad times or parameters are
    4xx: every refusal moves and stores nothing. With an ``Idempotency-Key``, a retry
    of the same request answers the pool the first one made (``Idempotent-Replayed:
    true``) and moves nothing; the key with another request is 422."""
    principal.require(SCOPE)
    starts_at = body.starts_at or ctx.now()
    spec = PoolSpec(
        title=body.title,
        funds=body.funds,
        rule=body.rule,
        starts_at=starts_at,
        ends_at=body.ends_at,
        join_deadline=body.join_deadline or body.ends_at,
        benchmarks=list(body.benchmarks),
        description=body.description,
        rule_params=dict(body.rule_params),
        ties=body.ties,
        max_params=body.max_params,
        kinds=list(body.kinds),
        entries_per_account=body.entries_per_account,
        period_s=body.period_s,
        final_sha256=body.final_sha256,
    )
    found = idempotency.claim(
        principal.account_id, "pool:create", idempotency_key, body.model_dump(mode="json")
    )
    done = idempotency.once(
        ctx, found, lambda record: pools.create_pool(ctx, principal, spec, record=record)
    )
    if done.made is not None:
        response.headers["Location"] = f"/v0/pools/{done.made.id}"
        return pool_out(done.made)
    assert done.earlier is not None
    response.headers["Location"] = f"/v0/pools/{done.earlier}"
    response.headers[idempotency.REPLAYED_HEADER] = "true"
    return pool_out(pools.get_pool(ctx, done.earlier).pool)


@router.get("/{pool_id}", response_model=PoolDetailOut)
def get_pool(pool_id: RowId, ctx: Context) -> PoolDetailOut:
    """A pool: its entries, the board (scores with 95% intervals, ranks with their
    range), what the rule pays for it now (the amounts paid once settled), the daily
    snapshots, the payout record once settled, and how to verify it."""
    found = pools.get_pool(ctx, pool_id)
    return PoolDetailOut(
        pool=pool_out(found.pool),
        entries=[entry_out(e) for e in found.entries],
        board=[row_out(r) for r in found.board],
        payouts=[
            PayoutOut(entry_id=p.entry_id, place=p.place, group=p.group, amount=p.amount)
            for p in found.payouts
        ],
        history=list(found.history),
        payout_record=found.payout_record,
        final=FinalProgressOut(**asdict(found.final)),
        verify=verify_text(found.pool, found.payout_record),
    )


@router.post("/{pool_id}/entries", status_code=status.HTTP_201_CREATED, response_model=PoolEntryOut)
def join_pool(pool_id: RowId, body: JoinIn, ctx: Context, principal: Writer) -> PoolEntryOut:
    """Enter a model you own (needs ``model:register``) while joins are open. Someone
    else's model is 403; after the join deadline, or over the entries per account, 409;
    the same weights entered already (under any account) 409 ``duplicate-entry``."""
    principal.require(SCOPE)
    return entry_out(pools.join_pool(ctx, principal, pool_id, str(body.model)))


@router.post("/{pool_id}/cancel", response_model=PoolOut)
def cancel_pool(pool_id: RowId, body: CancelIn, ctx: Context, principal: Writer) -> PoolOut:
    """Cancel a pool before settlement (admins only): its escrow goes back to the
    funder, and the reason is shown on the pool."""
    if not principal.acts_as_admin:
        raise PermissionDeniedError("cancelling a pool needs the 'admin' scope")
    return pool_out(pools.cancel_pool(ctx, principal, pool_id, body.reason))


@router.post("/{pool_id}/reveal", response_model=PoolOut)
def reveal_final_data(pool_id: RowId, body: RevealIn, ctx: Context, principal: Writer) -> PoolOut:
    """The funder reveals the held-out final dataset as a benchmark spec, after the end
    and before the reveal deadline (needs ``model:register``). The server fetches it
    (public addresses only, size-limited), checks that it hashes to the ``final_sha256``
    published at creation and checks every row; the runners then evaluate every entry
    on it, and the final standing is computed on it. Every refusal stores nothing."""
    principal.require(SCOPE)
    return pool_out(pools.reveal_final(ctx, principal, pool_id, body.spec))
