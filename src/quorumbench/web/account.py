"""The signed-in account's pages: ``/account`` and its API-token forms.

``/account`` shows the account's quota, credits (balance and newest ledger lines,
``services/ledger.py``), models, runners (with their keys) and API tokens
(``services/views/account.py``); signed out, it shows the ways to sign in.
Creating a token is a POST form with the session's CSRF token and a one-time nonce
(``services/web_sessions.py``): it answers with a redirect (303) to
``/account/tokens/created?form=<nonce>``, which shows the new token once; the same
form posted again makes nothing and leads to the same page. Revoking is a POST form
per token. Every refusal is an error page and changes nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response

from quorumbench.services import ledger, web_sessions
from quorumbench.services.accounts import revoke_own_token
from quorumbench.services.ratelimit import count_write
from quorumbench.services.views.account import account_view
from quorumbench.web.pool_view import fmt_credits
from quorumbench.web.routes import html_page, page_html
from quorumbench.web.session import (
    PostedForm,
    context,
    lookup,
    require_signed_in,
    session_cookie,
)
from quorumbench.web.signin import PRIVATE, signin_response

router = APIRouter(include_in_schema=False)
SCOPE_TEXT = {
    "task:pull": "pull tasks (a runner)",
    "task:submit": "submit results (a runner)",
    "model:register": "register models",
    "benchmark:create": "create and retire benchmarks (this account holds the permission)",
    "admin": "everything, as an admin",
}
"""What each scope lets a token do, beside its checkbox (one for each of ``SCOPES``)."""
LEDGER_LINES = 50
"""The newest ledger lines the credits section shows."""


@router.get("/account")
def account_page(
    request: Request,
    revoked: Annotated[int | None, Query(ge=1)] = None,
    registered: Annotated[int | None, Query(ge=1)] = None,
    already: Annotated[int | None, Query(ge=1)] = None,
    retired: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    """The signed-in account (signed out: the ways to sign in); ``revoked``,
    ``registered``, ``already`` and ``retired`` name what a form just did."""
    found = lookup(request)
    if found.session is None:
        return signin_response(request, "account_signin.html", active="account")
    ctx = context(request)
    view = account_view(ctx, found.session.principal)
    holder = ledger.account_holder(view.account_id)
    done = {"registered": registered, "already": already, "retired": retired}
    notice, notice_id = next(((k, v) for k, v in done.items() if v), (None, None))
    html = page_html(
        request,
        "account.html",
        view=view,
        required=ctx.settings.quota_evaluations,
        signed_in=found.session,
        nonce=web_sessions.new_nonce(),
        scope_text=SCOPE_TEXT,
        revoked=next((t for t in view.tokens if t.id == revoked and t.revoked_at), None),
        notice=notice,
        notice_model=next((m for m in view.models if m.model.id == notice_id), None),
        balance=ledger.balance(ctx, holder),
        ledger_lines=ledger.statement(ctx, holder, limit=LEDGER_LINES),
        ledger_lines_max=LEDGER_LINES,
        credits=fmt_credits,
        active="account",
    )
    return html_page(html, headers=PRIVATE)


@router.post("/account/tokens")
def create_token(request: Request, form: PostedForm) -> Response:
    """Make an API token with the chosen scopes, once per form; then show it."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    ctx = context(request)
    count_write(ctx, signed_in.principal)
    nonce = form.one("form")
    web_sessions.create_token_once(
        ctx,
        signed_in,
        session_cookie(request) or "",
        nonce,
        form.all("scope"),
        form.one("name"),
    )
    return RedirectResponse(f"/account/tokens/created?form={nonce}", status_code=303)


@router.get("/account/tokens/created")
def created_token_page(request: Request, form: Annotated[str, Query(max_length=64)]) -> Response:
    """The token a form made: in full the first time, never again."""
    found = lookup(request)
    if found.session is None:
        return signin_response(request, "account_signin.html", active="account")
    cookie = session_cookie(request) or ""
    created = web_sessions.created_token(context(request), found.session, cookie, form)
    html = page_html(
        request,
        "token_created.html",
        created=created,
        signed_in=found.session,
        active="account",
    )
    return html_page(html, headers=PRIVATE)


@router.post("/account/tokens/{token_id}/revoke")
def revoke_token(
    request: Request, token_id: Annotated[int, Path(ge=1)], form: PostedForm
) -> Response:
    """Revoke one of the account's tokens (another account's is not found)."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    ctx = context(request)
    count_write(ctx, signed_in.principal)
    revoke_own_token(ctx, signed_in.principal, token_id)
    return RedirectResponse(f"/account?revoked={token_id}#tokens", status_code=303)
