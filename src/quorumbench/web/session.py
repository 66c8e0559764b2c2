"""The site's side of signing in: cookies, posted forms and who is signed in.

The session cookie holds only an opaque id of a server-side session
(``services/web_sessions.py``): HttpOnly (no script reads it), SameSite=Lax (no
other site's form or script posts with it), Path=/, and Secure when the request came
over HTTPS (``request.url.scheme``: uvicorn sets it from ``X-Forwarded-Proto`` for
the proxies it trusts, ``FORWARDED_ALLOW_IPS``); over HTTPS its name also carries
the ``__Host-`` prefix, so no sibling subdomain can plant one. The sign-in form,
posted before there is a session, carries a double-submit token instead: a random
value in a SameSite cookie of its own and in the form, compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

from fastapi import Depends, Request, Response

from quorumbench.errors import AuthenticationError, ConfigError, CsrfError
from quorumbench.services.context import ServerContext
from quorumbench.services.oauth import LOGIN_MINUTES, CodeLogin
from quorumbench.services.web_sessions import Ended, Lookup, Opened, SignedIn, find_session

SESSION_COOKIE = "qb_session"
SIGNIN_COOKIE = "qb_signin"
"""The sign-in form's double-submit token (there is no session yet to hold one)."""
STATE_COOKIE = "qb_oauth_state"
"""Binds a code-flow login to the browser that started it (against login CSRF)."""
SECURE_PREFIX = "__Host-"
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FIELDS = 100


def context(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.context
    return ctx


def https(request: Request) -> bool:
    return request.url.scheme == "https"


def _name(request: Request, base: str) -> str:
    return SECURE_PREFIX + base if https(request) else base


def session_cookie(request: Request) -> str | None:
    """The session cookie this browser sent (of this scheme's name), if any."""
    return request.cookies.get(_name(request, SESSION_COOKIE)) or None


def lookup(request: Request) -> Lookup:
    """The browser's session (looked up once per request)."""
    found: Lookup | None = getattr(request.state, "qb_session", None)
    if found is None:
        found = find_session(context(request), session_cookie(request))
        request.state.qb_session = found
    return found


def viewer(request: Request) -> SignedIn | None:
    """Who is signed in in this browser; None when nobody is (the header says
    "Sign in")."""
    return lookup(request).session


def ended_text(ended: Ended | None) -> str | None:
    """Why the browser's session no longer signs it in, in words (None: it never had one)."""
    if ended is None:
        return None
    when = _when(ended.at)
    if ended.reason == "expired":
        return f"Your session expired{when}. Sign in again."
    if ended.reason == "signed-out":
        return f"This browser was signed out{when}. Sign in again."
    return "This browser's session is not known here any more. Sign in again."


def _when(at: datetime | None) -> str:
    return f" at {at.strftime('%Y-%m-%d %H:%M UTC')}" if at is not None else ""


def require_signed_in(request: Request) -> SignedIn:
    """The signed-in session, or AuthenticationError (401) saying why there is none."""
    found = lookup(request)
    if found.session is None:
        why = ended_text(found.ended) or "You are not signed in. Sign in first."
        raise AuthenticationError(f"{why} Nothing was changed.")
    return found.session


def set_session_cookie(response: Response, request: Request, opened: Opened) -> None:
    lifetime = opened.session.expires_at - opened.session.created_at
    response.set_cookie(
        _name(request, SESSION_COOKIE),
        opened.cookie,
        max_age=int(lifetime.total_seconds()),
        path="/",
        secure=https(request),
        httponly=True,
        samesite="lax",
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        _name(request, SESSION_COOKIE),
        path="/",
        secure=https(request),
        httponly=True,
        samesite="lax",
    )


def state_cookie_path(redirect_uri: str) -> str:
    """The state cookie goes back only to the callback (the path the provider returns to)."""
    return urlsplit(redirect_uri).path or "/"


def set_state_cookie(response: Response, request: Request, started: CodeLogin) -> None:
    response.set_cookie(
        STATE_COOKIE,
        started.state,
        max_age=LOGIN_MINUTES * 60,
        path=state_cookie_path(started.redirect_uri),
        secure="https" in (request.url.scheme, urlsplit(started.redirect_uri).scheme),
        httponly=True,
        samesite="lax",
    )


def signin_token(request: Request) -> str:
    """The sign-in form's token: the one in this browser's cookie, else a new one (for
    :func:`keep_signin_token` to set)."""
    token = request.cookies.get(_name(request, SIGNIN_COOKIE), "")
    return token if len(token) == 43 else secrets.token_urlsafe(32)


def keep_signin_token(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        _name(request, SIGNIN_COOKIE),
        token,
        path="/",
        secure=https(request),
        httponly=True,
        samesite="lax",
    )


def check_signin_token(request: Request, submitted: str | None) -> None:
    """Refuse (CsrfError) a sign-in form whose token is not this browser's cookie's."""
    held = request.cookies.get(_name(request, SIGNIN_COOKIE), "")
    if not held or not submitted or not hmac.compare_digest(held.encode(), submitted.encode()):
        raise CsrfError(
            "this sign-in form's security token is missing or is not this browser's (a "
            "form from another site, or cookies are off): nobody was signed in; reload "
            "the sign-in page and try again"
        )


class Form:
    """The fields of a posted form (``application/x-www-form-urlencoded``)."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self.fields = fields

    def one(self, name: str) -> str | None:
        """The field's value (the first, if it came more than once)."""
        return next((value for key, value in self.fields if key == name), None)

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.fields if key == name]


async def posted_form(request: Request) -> Form:
    """The request's form fields; none when the body is not a URL-encoded form (the
    checks that follow then refuse it for what it lacks)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != FORM_TYPE:
        return Form([])
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        return Form(parse_qsl(body, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except ValueError:
        raise ConfigError(f"a form has at most {MAX_FIELDS} fields") from None


PostedForm = Annotated[Form, Depends(posted_form)]
