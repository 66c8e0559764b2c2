"""Login sessions: exchange an API token or an OIDC ID token for an access JWT."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from quorumbench.api.deps import Context
from quorumbench.services import sessions

router = APIRouter(prefix="/v0/auth", tags=["auth"])
dev_router = APIRouter(prefix="/v0/auth", tags=["auth"])
"""Mounted only with QB_INSECURE_DEV_LOGIN (create_app)."""


Scope = Literal["task:pull", "task:submit", "model:register", "benchmark:create", "admin"]
"""What a credential may do (``services.accounts.SCOPES``)."""
Scopes = Annotated[list[Scope] | None, Field(description="Scopes wanted (default: all granted).")]


class ApiTokenLoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_token: str = Field(description="An API token (qb_...).")
    scopes: Scopes = None


class IdTokenLoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id_token: str = Field(description="An ID token of a configured OIDC issuer.")
    scopes: Scopes = None


def _login_kind(body: Any) -> str | None:
    given = {"api_token", "id_token"} & set(body) if isinstance(body, dict) else set()
    return given.pop() if len(given) == 1 else None


LoginIn = Annotated[
    Annotated[ApiTokenLoginIn, Tag("api_token")] | Annotated[IdTokenLoginIn, Tag("id_token")],
    Discriminator(
        _login_kind,
        custom_error_type="one_credential",
        custom_error_message="give exactly one of api_token and id_token",
    ),
]
"""One credential: an API token or an ID token (``oneOf`` in the OpenAPI document)."""


class RefreshIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refresh_token: str = Field(max_length=200)


@router.post("/token")
def login(body: LoginIn, ctx: Context) -> dict[str, Any]:
    """Open a session: an access JWT (short-lived) and a refresh token."""
    scopes: list[str] | None = None if body.scopes is None else [*body.scopes]
    if isinstance(body, ApiTokenLoginIn):
        return sessions.login_with_api_token(ctx, body.api_token, scopes)
    return sessions.login_with_oidc(ctx, body.id_token, scopes)


@router.post("/refresh")
def refresh(body: RefreshIn, ctx: Context) -> dict[str, Any]:
    """New access and refresh tokens; the refresh token sent is spent."""
    return sessions.refresh(ctx, body.refresh_token)


@router.post("/revoke", status_code=status.HTTP_204_NO_CONTENT)
def revoke(body: RefreshIn, ctx: Context) -> Response:
    """End a session: its refresh token and every access token issued under it."""
    sessions.revoke(ctx, body.refresh_token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


class DevLoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str = Field(max_length=63, description="The account (made if missing).")
    scopes: Scopes = None


@dev_router.post("/dev-login")
def dev_login(body: DevLoginIn, ctx: Context) -> dict[str, Any]:
    """INSECURE, development only: a session for any account, without credentials."""
    scopes: list[str] | None = None if body.scopes is None else [*body.scopes]
    return sessions.login_for_development(ctx, body.account, scopes)
