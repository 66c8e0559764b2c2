"""Login with an OAuth provider (GitHub): the code flow for browsers, the device flow
for the CLI (services/oauth.py)."""

from __future__ import annotations

import secrets
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from quorumbench.api.deps import Context
from quorumbench.errors import InvalidStateError
from quorumbench.services import oauth

router = APIRouter(prefix="/v0/auth", tags=["auth"])
STATE_COOKIE = "qb_oauth_state"
"""Binds a code-flow login to the browser that started it (against login CSRF)."""

Provider = Annotated[str, Path(max_length=32, description="A configured login provider.")]


class DevicePollIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = Field(max_length=100, description="The handle the device login began with.")


def _cookie_path(redirect_uri: str) -> str:
    """The state cookie goes back only to the callback (the path the provider returns to)."""
    return urlsplit(redirect_uri).path or "/"


@router.get("/{provider}/login", status_code=302, response_class=RedirectResponse)
def login(provider: Provider, request: Request, ctx: Context) -> Response:
    """Send the browser to the provider to log in (state and a PKCE challenge attached)."""
    callback = str(request.url_for("oauth_callback", provider=provider))
    started = oauth.start_code_login(ctx, provider, callback)
    response = RedirectResponse(started.authorize_url, status_code=302)
    response.set_cookie(
        STATE_COOKIE,
        started.state,
        max_age=oauth.LOGIN_MINUTES * 60,
        path=_cookie_path(started.redirect_uri),
        secure="https" in (request.url.scheme, urlsplit(started.redirect_uri).scheme),
        httponly=True,
        samesite="lax",
    )
    return response


@router.get(
    "/{provider}/callback",
    name="oauth_callback",
    responses={
        200: {"description": "The session (without ``QB_LOGIN_RETURN_PATH``)."},
        303: {
            "description": "To ``QB_LOGIN_RETURN_PATH``, the session in the URL fragment.",
            "headers": {"Location": {"schema": {"type": "string"}, "required": True}},
        },
    },
)
def callback(
    provider: Provider,
    request: Request,
    ctx: Context,
    state: Annotated[str | None, Query(max_length=200)] = None,
    code: Annotated[str | None, Query(max_length=500)] = None,
    error: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    """Where the provider sends the browser back: a session (JSON, or a redirect to
    ``QB_LOGIN_RETURN_PATH`` with the session in the URL fragment)."""
    configured = oauth.provider_for(ctx, provider).redirect_uri  # 404 for an unknown one
    if not state:
        raise InvalidStateError("the callback carries no state: start the login again")
    started = request.cookies.get(STATE_COOKIE, "")
    if not secrets.compare_digest(started.encode(), state.encode()):
        raise InvalidStateError(
            "this login was not started in this browser (its state cookie is missing or "
            "differs): start the login again"
        )
    session = oauth.finish_code_login(ctx, provider, state, code, error)
    return_path = ctx.settings.login_return_path
    response: Response
    if return_path:
        response = RedirectResponse(f"{return_path}#{urlencode(session)}", status_code=303)
    else:
        response = JSONResponse(session)
    callback_url = configured or str(request.url_for("oauth_callback", provider=provider))
    response.delete_cookie(STATE_COOKIE, path=_cookie_path(callback_url))
    return response


@router.post("/{provider}/device")
def device_start(provider: Provider, ctx: Context) -> dict[str, Any]:
    """Start a device login: show ``user_code`` and ``verification_uri``, then poll
    ``/device/token`` with ``device`` every ``interval`` seconds."""
    return oauth.start_device_login(ctx, provider)


@router.post("/{provider}/device/token")
def device_token(provider: Provider, body: DevicePollIn, ctx: Context) -> dict[str, Any]:
    """The session once the code is approved; until then 428 ``authorization-pending``
    or ``slow-down`` (wait ``interval`` seconds), 403 if declined, 410 if expired."""
    return oauth.poll_device_login(ctx, provider, body.device)
