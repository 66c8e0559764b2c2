"""Runners' signing keys (register, rotating out the old one; list; revoke; look up) and
the caller's own account (``/v0/me``: who, which scopes) and standing (``/v0/me/quota``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from quorumbench.api.deps import Context, CurrentPrincipal, Writer
from quorumbench.api.schemas import MeOut, QuotaStatus, RunnerKeyIn, RunnerKeyOut
from quorumbench.services import runner_keys
from quorumbench.services.quota import quota
from quorumbench.services.runners import NAME_PATTERN

router = APIRouter(prefix="/v0", tags=["runners"])
RunnerName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="The runner's name within the account: 1-64 letters, digits, '_', '.', '-'.",
    ),
]


@router.post(
    "/runners/{runner}/keys", status_code=status.HTTP_201_CREATED, response_model=RunnerKeyOut
)
def register_key(
    runner: RunnerName, body: RunnerKeyIn, ctx: Context, principal: Writer
) -> RunnerKeyOut:
    """Register this runner's Ed25519 public key (``task:submit``); older keys are revoked."""
    principal.require("task:submit")
    key = runner_keys.register_key(ctx, principal, runner, body.public_key)
    return RunnerKeyOut(**key)


@router.get("/runners/{runner}/keys", response_model=list[RunnerKeyOut])
def list_keys(runner: RunnerName, ctx: Context, principal: CurrentPrincipal) -> list[RunnerKeyOut]:
    """This account's runner's keys, revoked ones included (``task:submit``)."""
    principal.require("task:submit")
    return [RunnerKeyOut(**k) for k in runner_keys.runner_keys(ctx, principal, runner)]


@router.delete("/runners/{runner}/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_key(runner: RunnerName, key_id: str, ctx: Context, principal: Writer) -> Response:
    """Revoke a key (``task:submit``): results it signs are refused from now on."""
    principal.require("task:submit")
    runner_keys.revoke_key(ctx, principal, runner, key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/runner-keys/{key_id}", response_model=RunnerKeyOut)
def get_key(key_id: str, ctx: Context) -> RunnerKeyOut:
    """Any runner key by id (public: results in the log name the key that signed them)."""
    return RunnerKeyOut(**runner_keys.public_key(ctx, key_id))


@router.get("/me", response_model=MeOut)
def me(principal: CurrentPrincipal) -> MeOut:
    """The account behind this credential (API token or access JWT) and its scopes: what a
    runner checks before it pulls."""
    return MeOut(
        account_id=principal.account_id,
        name=principal.name,
        is_admin=principal.is_admin,
        scopes=sorted(principal.scopes),
    )


@router.get("/me/quota", response_model=QuotaStatus)
def my_quota(ctx: Context, principal: CurrentPrincipal) -> QuotaStatus:
    """Progress towards registering a model: accepted evaluations and weekly registrations."""
    return quota(ctx, principal)
