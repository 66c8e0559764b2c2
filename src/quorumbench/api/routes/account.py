"""The caller's own account: its page's data, its models, its API tokens."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from quorumbench.api.deps import Context, CurrentPrincipal, Writer
from quorumbench.api.params import RowId
from quorumbench.api.schemas import (
    AccountOut,
    GrantIn,
    GrantOut,
    ModelOut,
    OwnedModelOut,
    OwnRunnerOut,
    TokenCreatedOut,
    TokenIn,
    TokenOut,
)
from quorumbench.errors import PermissionDeniedError
from quorumbench.services import accounts, grants
from quorumbench.services.models import OwnedModel, owned_models
from quorumbench.services.views.account import account_view

router = APIRouter(prefix="/v0", tags=["account"])


def _owned(found: OwnedModel) -> OwnedModelOut:
    return OwnedModelOut(
        model=ModelOut.model_validate(found.model),
        status=found.status,
        tasks_done=found.tasks_done,
        tasks_disputed=found.tasks_disputed,
        tasks_open=found.tasks_open,
        aggregate_complete=found.aggregate_complete,
        url=f"/models/{found.model.id}",
    )


@router.get("/me/account", response_model=AccountOut)
def my_account(ctx: Context, principal: CurrentPrincipal) -> AccountOut:
    """The caller's account as its page shows it: quota, models with their status,
    runners with their keys, API tokens (never their secret)."""
    view = account_view(ctx, principal)
    return AccountOut(
        account_id=view.account_id,
        name=view.name,
        is_admin=view.is_admin,
        created_at=view.created_at,
        scopes=view.scopes,
        quota=view.quota,
        models=[_owned(m) for m in view.models],
        runners=[OwnRunnerOut.model_validate(r) for r in view.runners],
        tokens=[TokenOut.model_validate(t) for t in view.tokens],
        benchmark_create=GrantOut.model_validate(view.benchmark_create),
    )


@router.post("/accounts/{account}/grants", response_model=GrantOut)
def change_grant(
    account: Annotated[str, Path(max_length=64)], body: GrantIn, ctx: Context, principal: Writer
) -> GrantOut:
    """Grant or revoke an account's ``benchmark:create`` permission (admin only);
    recorded with the admin and the reason, and shown on the account's page."""
    if not principal.acts_as_admin:
        raise PermissionDeniedError("granting permissions needs the 'admin' scope")
    status_ = grants.change_grant(ctx, principal.account_id, account, body.action, body.reason)
    return GrantOut.model_validate(status_)


@router.get("/me/models", response_model=list[OwnedModelOut])
def my_models(ctx: Context, principal: CurrentPrincipal) -> list[OwnedModelOut]:
    """The caller's account's models, newest first, each with its status."""
    return [_owned(m) for m in owned_models(ctx, principal)]


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(ctx: Context, principal: CurrentPrincipal) -> list[TokenOut]:
    """The caller's account's API tokens, newest first, revoked ones included: id,
    name, prefix, scopes, times. Never a token itself."""
    return [TokenOut.model_validate(t) for t in accounts.list_tokens(ctx, principal)]


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreatedOut)
def create_token(body: TokenIn, ctx: Context, principal: Writer) -> TokenCreatedOut:
    """A new API token for the caller's account, with scopes the request's credential
    holds (an API token or a session's JWT). The token is in this answer only."""
    held = [s for s in accounts.SCOPES if s in principal.scopes]  # the default: all of them
    issued = accounts.create_token(
        ctx,
        principal,
        held if body.scopes is None else list(body.scopes),
        body.name,
        expires_in=timedelta(days=body.expires_in_days) if body.expires_in_days else None,
    )
    shown = TokenOut.model_validate(issued.record)
    return TokenCreatedOut(**shown.model_dump(), token=issued.token)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(token_id: RowId, ctx: Context, principal: Writer) -> Response:
    """Revoke one of the caller's tokens, and the sessions opened with it: refused from
    now on. Another account's token is 404; one with scopes this credential lacks, 403.
    Revoking twice changes nothing."""
    accounts.revoke_own_token(ctx, principal, token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
