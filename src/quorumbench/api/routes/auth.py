"""Login sessions: exchange an API token or an OIDC ID token for an access JWT."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field, model_validator

from quorumbench.api.deps import Context
from quorumbench.services import sessions

router = APIRouter(prefix="/v0/auth", tags=["auth"])
dev_router = APIRouter(prefix="/v0/auth", tags=["auth"])
"""Mounted only with QB_INSECURE_DEV_LOGIN (create_app)."""


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_token: str | None = Field(None, description="An API token (qb_...).")
    id_token: str | None = Field(None, description="An ID token of a configured OIDC issuer.")
    scopes: list[str] | None = Field(None, description="Scopes wanted (default: all granted).")

    @model_validator(mode="after")
    def _one(self) -> LoginIn:
        if (self.api_token is None) == (self.id_token is None):
            raise ValueError("give exactly one of api_token and id_token")
        return self


class RefreshIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refresh_token: str = Field(max_length=200)


@router.post("/token")
def login(body: LoginIn, ctx: Context) -> dict[str, Any]:
    """Open a session: an access JWT (short-lived) and a refresh token."""
    if body.api_token is not None:
        return sessions.login_with_api_token(ctx, body.api_token, body.scopes)
    assert body.id_token is not None
    return sessions.login_with_oidc(ctx, body.id_token, body.scopes)


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
    scopes: list[str] | None = Field(None, description="Scopes wanted (default: all granted).")


@dev_router.post("/dev-login")
def dev_login(body: DevLoginIn, ctx: Context) -> dict[str, Any]:
    """INSECURE, development only: a session for any account, without credentials."""
    return sessions.login_for_development(ctx, body.account, body.scopes)
