"""Runners pull, heartbeat, release and submit over these endpoints.

These are the server's hot paths. Each request runs its blocking part
(authentication, the runner's id, the database work) as one unit through
:func:`~quorumbench.api.deps.offload`: inline on SQLite, else in one trip to a small
pool of threads.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from quorumbench.api.deps import BearerToken, Context, offload
from quorumbench.api.params import RowId
from quorumbench.errors import PermissionDeniedError, ServiceUnavailableError
from quorumbench.logs import event
from quorumbench.protocol import (
    EDGE_SINCE,
    GGUF_ADAPTER_SINCE,
    LEGACY_ENGINES,
    Attempt,
    EdgeSubmission,
    Engine,
    FailureReport,
    Heartbeat,
    HeartbeatAck,
    LeaseGrant,
    LeaseRequest,
    Receipt,
    RunnerName,
    Submission,
    check_version,
    speaks,
)
from quorumbench.services import leases
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.edge_results import submit_edge
from quorumbench.services.leases import Claim, Claimant
from quorumbench.services.ratelimit import count_write
from quorumbench.services.results import submit_result
from quorumbench.services.runners import runner_for
from quorumbench.services.sessions import authenticate

router = APIRouter(prefix="/v0/leases", tags=["leases"])
log = logging.getLogger("quorumbench.leases")


def _writer(ctx: ServerContext, token: str | None, *scopes: str) -> Principal:
    """The caller, counted against its write limit, holding every one of ``scopes``."""
    principal = authenticate(ctx, token)
    count_write(ctx, principal)
    for scope in scopes:
        principal.require(scope)
    return principal


def _claimant(
    ctx: ServerContext,
    token: str | None,
    scope: str,
    runner: str,
    *,
    pulling: bool = False,
    protocol_version: str | None = None,
    engines: list[Engine] | None = None,
) -> Claimant:
    # A suspended runner may not pull, but may heartbeat, release and submit what it
    # holds: its results are kept for the record and not counted. A protocol version is
    # checked once the caller is known, before anything is made for it.
    principal = _writer(ctx, token, scope)
    if protocol_version is not None:
        check_version(protocol_version)
    claimant = runner_for(ctx, principal, runner, allow_suspended=not pulling, create=pulling)
    return _able(claimant, protocol_version, engines)


def _able(
    claimant: Claimant, protocol_version: str | None, engines: list[Engine] | None
) -> Claimant:
    """``claimant`` with what its runner can do: edge tasks when it speaks the protocol
    that has them, the engines it lists (those of a runner before 1.3 when none), LoRA
    adapters on llama.cpp when it speaks 1.4."""
    edge = protocol_version is not None and speaks(protocol_version, EDGE_SINCE)
    adapters = protocol_version is not None and speaks(protocol_version, GGUF_ADAPTER_SINCE)
    has = LEGACY_ENGINES if engines is None else tuple(dict.fromkeys(engines))
    return replace(claimant, edge=edge, engines=has, gguf_adapters=adapters)


def _who(claimant: Claimant) -> dict[str, int]:
    return {"account": claimant.account_id, "runner": claimant.runner_id}


def _granted(claimant: Claimant, claim: Claim | None) -> None:
    if claim is None:
        event(log, "lease.none", level=logging.DEBUG, **_who(claimant))
        return
    event(
        log,
        "lease.granted",
        lease=claim.lease_id,
        task=claim.task_id,
        attempt=claim.attempt,
        **_who(claimant),
    )


def _lease_out(claim: Claim) -> LeaseGrant:
    return LeaseGrant(
        lease_id=claim.lease_id, attempt=claim.attempt, expires_at=claim.expires_at, task=claim.task
    )


RunnerQuery = Annotated[RunnerName, Query(description="The runner's name within the account.")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=LeaseGrant,
    responses={204: {"description": "No task is available for this runner now."}},
)
async def pull(
    body: LeaseRequest, ctx: Context, token: BearerToken, request: Request
) -> LeaseGrant | Response:
    """Lease one task slot (``task:pull``). 204 when there is nothing to do.

    Send a fresh ``pull_key`` with each pull and the same key on its retries: a
    repeated key returns the lease the first request made (never a second slot).
    A runner whose ``protocol_version`` this server does not accept gets 426 and the
    versions it accepts.
    """

    def work() -> Claim | None:
        claimant = _claimant(
            ctx,
            token,
            "task:pull",
            body.runner,
            pulling=True,
            protocol_version=body.protocol_version,
            engines=body.engines,
        )
        claim = leases.pull(ctx, claimant, body.pull_key)
        _granted(claimant, claim)
        return claim

    claim = await offload(request, work)
    if claim is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return _lease_out(claim)


@router.post("/{lease_id}/heartbeat", response_model=HeartbeatAck)
async def heartbeat(
    lease_id: RowId,
    body: Heartbeat,
    ctx: Context,
    token: BearerToken,
    request: Request,
    runner: RunnerQuery = "default",
) -> HeartbeatAck:
    """Extend a lease; 409 when it expired or was superseded."""

    def work() -> datetime:
        claimant = _claimant(ctx, token, "task:pull", runner)
        return leases.heartbeat(ctx, claimant, lease_id, body.attempt)

    return HeartbeatAck(lease_id=lease_id, expires_at=await offload(request, work))


@router.delete("/{lease_id}", status_code=status.HTTP_204_NO_CONTENT)
async def release(
    lease_id: RowId,
    ctx: Context,
    token: BearerToken,
    request: Request,
    attempt: Annotated[Attempt, Query(description="The lease's fencing token.")],
    runner: RunnerQuery = "default",
) -> Response:
    """Give the lease back now; its task slot is claimable again at once."""

    def work() -> None:
        claimant = _claimant(ctx, token, "task:pull", runner)
        leases.release(ctx, claimant, lease_id, attempt)
        event(log, "lease.released", lease=lease_id, **_who(claimant))

    await offload(request, work)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{lease_id}/failure", status_code=status.HTTP_204_NO_CONTENT)
async def fail(
    lease_id: RowId,
    body: FailureReport,
    ctx: Context,
    token: BearerToken,
    request: Request,
    runner: RunnerQuery = "default",
) -> Response:
    """Report that this runner could not evaluate the task (its sandbox stopped the
    evaluation, the model does not load, its data differs): the lease ends FAILED with
    the reason, the slot is claimable again, and this account is not offered the task
    again. A model whose tasks keep failing is paused (services/failures.py)."""

    def work() -> None:
        claimant = _claimant(ctx, token, "task:pull", runner)
        leases.report_failure(ctx, claimant, lease_id, body.attempt, body.reason)
        event(log, "lease.failed", lease=lease_id, reason=body.reason, **_who(claimant))

    await offload(request, work)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{lease_id}/result", response_model=Receipt)
async def submit(
    lease_id: RowId,
    body: Submission,
    ctx: Context,
    token: BearerToken,
    request: Request,
    response: Response,
    runner: RunnerQuery = "default",
) -> Receipt:
    """Submit the result of a lease (``task:submit``). Repeating it is harmless.

    With ``next_pull_key`` the runner also pulls its next task in the same request
    (needs ``task:pull`` too): ``next`` is that lease, or null when there is nothing
    to do or the queue could not be reached. The submission stands either way; on a
    null ``next`` pull as usual, with the same key.
    """

    def work() -> Receipt:
        pulls = () if body.next_pull_key is None else ("task:pull",)
        principal = _writer(ctx, token, "task:submit", *pulls)  # before anything is stored
        check_version(body.protocol_version)
        claimant = runner_for(ctx, principal, runner, allow_suspended=True, create=False)
        outcome = submit_result(ctx, claimant, lease_id, body.attempt, body.result, body.signature)
        event(
            log,
            "result.duplicate" if outcome.duplicate else "result.accepted",
            lease=lease_id,
            result=outcome.result_id,
            task=outcome.task_id,
            task_status=outcome.task_status,
            round=outcome.round,
            score=body.result.score,
            **_who(claimant),
        )
        following = None
        if body.next_pull_key is not None:
            following = _pull_next(
                ctx, principal, runner, body.next_pull_key, body.protocol_version, body.engines
            )
        return Receipt(**outcome.__dict__, next=following)

    out = await offload(request, work)
    response.status_code = status.HTTP_200_OK if out.duplicate else status.HTTP_201_CREATED
    return out


def _pull_next(
    ctx: ServerContext,
    principal: Principal,
    runner: str,
    key: str,
    protocol_version: str,
    engines: list[Engine] | None,
) -> LeaseGrant | None:
    """The next lease for a runner that just submitted; None rather than an error.

    The submission is committed by now, so nothing here may fail the request: a
    runner suspended by this very result, or a queue that cannot be reached, gets
    ``next: null`` and sees the reason on its next plain pull (same key).
    """
    try:
        claimant = _able(runner_for(ctx, principal, runner), protocol_version, engines)
        claim = leases.pull(ctx, claimant, key)
    except (PermissionDeniedError, ServiceUnavailableError):
        return None
    _granted(claimant, claim)
    return None if claim is None else _lease_out(claim)


@router.post("/{lease_id}/edge", response_model=Receipt)
async def submit_edge_report(
    lease_id: RowId,
    body: EdgeSubmission,
    ctx: Context,
    token: BearerToken,
    request: Request,
    response: Response,
    runner: RunnerQuery = "default",
) -> Receipt:
    """Submit the signed report of an edge lease (``task:submit``; protocol 1.2 and
    later). Repeating it is harmless. The task is final once its quorum of runners (of
    distinct accounts) have reported; there is no consensus on the figures (hardware
    data, see docs/efficiency.md)."""

    def work() -> Receipt:
        principal = _writer(ctx, token, "task:submit")  # before anything is stored
        check_version(body.protocol_version)
        claimant = runner_for(ctx, principal, runner, allow_suspended=True, create=False)
        outcome = submit_edge(ctx, claimant, lease_id, body.attempt, body.result, body.signature)
        event(
            log,
            "edge.duplicate" if outcome.duplicate else "edge.accepted",
            lease=lease_id,
            result=outcome.result_id,
            task=outcome.task_id,
            task_status=outcome.task_status,
            **_who(claimant),
        )
        return Receipt(**outcome.__dict__)

    out = await offload(request, work)
    response.status_code = status.HTTP_200_OK if out.duplicate else status.HTTP_201_CREATED
    return out
