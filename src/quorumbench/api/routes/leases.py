"""Runners pull, heartbeat, release and submit over these endpoints."""

from __future__ import annotations

from fastapi import APIRouter, Query, Response, status

from quorumbench.api.deps import Context, CurrentPrincipal
from quorumbench.api.schemas import (
    HeartbeatIn,
    HeartbeatOut,
    LeaseIn,
    LeaseOut,
    SubmitIn,
    SubmitOut,
)
from quorumbench.queue.base import Claimant
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.results import submit_result
from quorumbench.services.runners import runner_for

router = APIRouter(prefix="/v0/leases", tags=["leases"])


def _claimant(
    ctx: ServerContext, principal: Principal, runner: str, *, pulling: bool = False
) -> Claimant:
    # A suspended runner may not pull, but may heartbeat, release and submit what it
    # holds: its results are kept for the record and not counted.
    return runner_for(ctx, principal, runner, allow_suspended=not pulling)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=LeaseOut,
    responses={204: {"description": "No task is available for this runner now."}},
)
def pull(body: LeaseIn, ctx: Context, principal: CurrentPrincipal) -> LeaseOut | Response:
    """Lease one task slot (``task:pull``). 204 when there is nothing to do.

    Send a fresh ``pull_key`` with each pull and the same key on its retries: a
    repeated key returns the lease the first request made (never a second slot).
    """
    principal.require("task:pull")
    claimant = _claimant(ctx, principal, body.runner, pulling=True)
    claim = ctx.queue.claim(claimant, ctx.now(), body.pull_key)
    if claim is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return LeaseOut(
        lease_id=claim.lease_id, attempt=claim.attempt, expires_at=claim.expires_at, task=claim.task
    )


@router.post("/{lease_id}/heartbeat", response_model=HeartbeatOut)
def heartbeat(
    lease_id: int,
    body: HeartbeatIn,
    ctx: Context,
    principal: CurrentPrincipal,
    runner: str = Query("default"),
) -> HeartbeatOut:
    """Extend a lease; 409 when it expired or was superseded."""
    principal.require("task:pull")
    claimant = _claimant(ctx, principal, runner)
    expires = ctx.queue.heartbeat(claimant, lease_id, body.attempt, ctx.now())
    return HeartbeatOut(lease_id=lease_id, expires_at=expires)


@router.delete("/{lease_id}", status_code=status.HTTP_204_NO_CONTENT)
def release(
    lease_id: int,
    ctx: Context,
    principal: CurrentPrincipal,
    attempt: int = Query(...),
    runner: str = Query("default"),
) -> Response:
    """Give the lease back now; its task slot is claimable again at once."""
    principal.require("task:pull")
    ctx.queue.release(_claimant(ctx, principal, runner), lease_id, attempt, ctx.now())
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{lease_id}/result", response_model=SubmitOut)
def submit(
    lease_id: int,
    body: SubmitIn,
    ctx: Context,
    principal: CurrentPrincipal,
    response: Response,
    runner: str = Query("default"),
) -> SubmitOut:
    """Submit the result of a lease (``task:submit``). Repeating it is harmless."""
    principal.require("task:submit")
    claimant = _claimant(ctx, principal, runner)
    outcome = submit_result(ctx, claimant, lease_id, body.attempt, body.result)
    response.status_code = status.HTTP_200_OK if outcome.duplicate else status.HTTP_201_CREATED
    return SubmitOut(**outcome.__dict__)
