"""Login with an OAuth provider (GitHub): the code flow for browsers, the device flow
for the CLI (services/oauth.py).

The callback is the one URL registered at the provider, for the API's code flow and
the site's sign-in alike: a login the site started (``/signin/{provider}``) ends in
``web/signin.py``, which signs the browser in and sends it to ``/account``.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from quorumbench.api.deps import Context
from quorumbench.api.problems import show_errors_as_page
from quorumbench.errors import InvalidStateError
from quorumbench.services import oauth
from quorumbench.web import signin
from quorumbench.web.session import STATE_COOKIE, set_state_cookie, state_cookie_path

router = APIRouter(prefix="/v0/auth", tags=["auth"])

Provider = Annotated[str, Path(max_length=32, description="A configured login provider.")]


class DevicePollIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = Field(max_length=100, description="The handle the device login began with.")


@router.get("/{provider}/login", status_code=302, response_class=RedirectResponse)
def login(provider: Provider, request: Request, ctx: Context) -> Response:
    """Send the browser to the provider to log in (state and a PKCE challenge attached)."""
    callback = str(request.url_for("oauth_callback", provider=provider))
    started = oauth.start_code_login(ctx, provider, callback)
    response = RedirectResponse(started.authorize_url, status_code=302)
    set_state_cookie(response, request, started)
    return response


@router.get(
    "/{provider}/callback",
    name="oauth_callback",
    responses={
        200: {"description": "The session (without ``QB_LOGIN_RETURN_PATH``)."},
        303: {
            "description": "To ``QB_LOGIN_RETURN_PATH``, the session in the URL fragment; "
            "for a login the site started, to ``/account``, signed in (a session cookie).",
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
    ``QB_LOGIN_RETURN_PATH`` with the session in the URL fragment); for a login the site
    started, a session cookie and a redirect to ``/account``."""
    configured = oauth.provider_for(ctx, provider).redirect_uri  # 404 for an unknown one
    if not state:
        raise InvalidStateError("the callback carries no state: start the login again")
    for_site = oauth.started_on_site(ctx, provider, state)
    if for_site:  # a person's browser: refusals are pages too
        show_errors_as_page(request)
    started = request.cookies.get(STATE_COOKIE, "")
    if not secrets.compare_digest(started.encode(), state.encode()):
        raise InvalidStateError(
            "this login was not started in this browser (its state cookie is missing or "
            "differs): start the login again"
        )
    response: Response
    if for_site:
        response = signin.finish_site_login(request, provider, state, code, error)
    else:
        session = oauth.finish_code_login(ctx, provider, state, code, error)
        return_path = ctx.settings.login_return_path
        if return_path:
            response = RedirectResponse(f"{return_path}#{urlencode(session)}", status_code=303)
        else:
            response = JSONResponse(session)
    callback_url = configured or str(request.url_for("oauth_callback", provider=provider))
    response.delete_cookie(STATE_COOKIE, path=state_cookie_path(callback_url))
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
