"""Signing in and out on the site: ``/signin``, ``/signin/{provider}``, ``/signin/dev``
and ``/signout``, and the end of a login the site started (:func:`finish_site_login`).

"Sign in with GitHub" runs the server's OAuth code flow (state and PKCE,
``services/oauth.py``) through the one callback URL registered at the provider,
``/v0/auth/{provider}/callback``: a login started here is stored as the site's, so
that callback hands it to :func:`finish_site_login`, which opens a server-side
session (``services/web_sessions.py``) and sets its cookie instead of answering API
tokens. With ``QB_INSECURE_DEV_LOGIN`` the page also shows a development sign-in
form (any account, no credential). Sign-out is a POST form with the session's CSRF
token: it ends the session on the server and clears the cookie.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from quorumbench.errors import NotFoundError
from quorumbench.services import oauth, web_sessions
from quorumbench.web.routes import html_page, page_html
from quorumbench.web.session import (
    PostedForm,
    check_signin_token,
    clear_session_cookie,
    context,
    ended_text,
    keep_signin_token,
    lookup,
    session_cookie,
    set_session_cookie,
    set_state_cookie,
    signin_token,
)

router = APIRouter(include_in_schema=False)
LABELS = {"github": "GitHub"}
"""How a provider is named on its button, where its configured name is not enough."""
PRIVATE = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin"}
"""Headers of every page that shows what only the signed-in person may see."""


def signin_choices(request: Request, token: str) -> dict[str, Any]:
    """What the sign-in options show: a button per provider, the development form."""
    settings = context(request).settings
    providers = [
        (LABELS.get(p.name, p.name), f"/signin/{p.name}") for p in settings.oauth_providers
    ]
    return {
        "providers": providers,
        "dev_login": settings.insecure_dev_login,
        "signin_token": token,
    }


def signin_response(
    request: Request, template: str, status: int = 200, **extra: Any
) -> HTMLResponse:
    """A page with the sign-in options (``/signin``, ``/account`` signed out); a cookie
    of a session that has ended is cleared, and the page says why it ended."""
    found = lookup(request)
    token = signin_token(request)
    html = page_html(
        request,
        template,
        ended=ended_text(found.ended),
        **signin_choices(request, token),
        **extra,
    )
    response = html_page(html, status_code=status, headers=PRIVATE)
    keep_signin_token(response, request, token)
    if found.ended is not None:
        clear_session_cookie(response, request)
    return response


@router.get("/signin")
def signin_page(request: Request, signed_out: bool = False) -> Response:
    """The ways to sign in here (or who is signed in already)."""
    return signin_response(request, "signin.html", signed_out=signed_out, active="account")


@router.get("/signin/{provider}")
def signin_with(provider: Annotated[str, Path(max_length=32)], request: Request) -> Response:
    """Send the browser to the provider (state and a PKCE challenge attached); it comes
    back to the API's callback, which finishes the sign-in here."""
    ctx = context(request)
    callback = str(request.url_for("oauth_callback", provider=provider))
    started = oauth.start_code_login(ctx, provider, callback, for_site=True)
    response = RedirectResponse(started.authorize_url, status_code=302)
    set_state_cookie(response, request, started)
    return response


@router.post("/signin/dev")
def signin_for_development(request: Request, form: PostedForm) -> Response:
    """INSECURE, development only: sign in as any account (made if missing)."""
    ctx = context(request)
    if not ctx.settings.insecure_dev_login:
        raise NotFoundError("the development sign-in is off (QB_INSECURE_DEV_LOGIN)")
    check_signin_token(request, form.one("signin_token"))
    name = (form.one("account") or "").strip()
    opened = web_sessions.sign_in_for_development(ctx, name, replacing=session_cookie(request))
    response = RedirectResponse("/account", status_code=303)
    set_session_cookie(response, request, opened)
    return response


@router.post("/signout")
def signout(request: Request, form: PostedForm) -> Response:
    """End this browser's session on the server and clear its cookie."""
    found = lookup(request)
    cookie = session_cookie(request)
    if found.session is not None and cookie:
        web_sessions.check_csrf(found.session, form.one("csrf"))
        web_sessions.sign_out(context(request), cookie)
    response = RedirectResponse("/signin?signed_out=1", status_code=303)
    clear_session_cookie(response, request)
    return response


def finish_site_login(
    request: Request, provider: str, state: str, code: str | None, error: str | None
) -> Response:
    """The end of a login the site started (the API's callback calls it): the browser
    gets a new session (the one it held, if any, ends) and goes to ``/account``."""
    ctx = context(request)
    login = oauth.finish_site_login(ctx, provider, state, code, error)
    opened = web_sessions.sign_in(ctx, login.account, login.via, replacing=session_cookie(request))
    response = RedirectResponse("/account", status_code=303)
    set_session_cookie(response, request, opened)
    return response
