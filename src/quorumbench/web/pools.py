"""Prize pools on the site: ``/pools``, ``/pools/new`` and ``/pools/{id}``.

* ``GET /pools`` lists the pools in three sections, open (entries open or running),
  upcoming and ended, each with its funds, rule and the time left.
* ``GET /pools/new`` is the create form of a signed-in funder (signed out: a link to
  sign in), with the account's balance; ``POST /pools/new`` (the session's CSRF token)
  creates the pool through ``services/pools.create_pool``, which moves the funds into
  the pool's escrow, and sends the browser (303) to the pool's page. A form that lacks
  something, or that the service refuses (funds over the balance, an end before the
  start, a fractional amount, an unknown rule or bad parameters), is shown back with
  the message and what was typed (4xx); nothing is created or moved.
* ``GET /pools/{id}`` shows the pool: its description, funds and rule, the board with
  ranks and 95% intervals beside what the rule pays for it now (the paid amounts after
  settlement, with the public log entry of the payout record), the entries, the
  board's history per period, and how to verify the payouts. A signed-in trainer
  gets a join form while entries are open: one of their own models;
  ``POST /pools/{id}/join`` (CSRF token) enters it through ``services/pools.join_pool``
  and comes back (303) to the page; a refusal (someone else's model, the deadline
  passed, the same weights entered already) is shown in place, nothing changed.

Everything works without JavaScript: the forms are plain HTML posts.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response

from quorumbench.core.allocation import RULES, TIE_POLICIES
from quorumbench.core.plans import MODEL_KINDS
from quorumbench.errors import (
    ConflictError,
    InvalidSpecError,
    NotFoundError,
    PermissionDeniedError,
    QuorumError,
    RateLimitedError,
)
from quorumbench.services import ledger, pools, web_sessions
from quorumbench.services.board import active_benchmarks
from quorumbench.services.models import owned_models
from quorumbench.services.ratelimit import count_write
from quorumbench.services.web_pools import create_pool_once
from quorumbench.services.web_sessions import SignedIn
from quorumbench.web import pool_view
from quorumbench.web.pool_form import (
    DESCRIPTION_MAX,
    KIND_TEXT,
    PERIOD_HOURS_MAX,
    RULE_PARAMS,
    RULE_TEXT,
    TIE_TEXT,
    FormProblem,
    PoolForm,
)
from quorumbench.web.routes import _page, html_page, page_html, parse_size
from quorumbench.web.session import PostedForm, context, require_signed_in, viewer
from quorumbench.web.signin import PRIVATE

router = APIRouter(include_in_schema=False)
PoolId = Annotated[int, Path(ge=1, le=2**31 - 1)]
STATUS = (
    (NotFoundError, 404),
    (ConflictError, 409),
    (PermissionDeniedError, 403),
    (InvalidSpecError, 422),
)
"""The API's statuses (``api/problems.STATUS``) of the refusals these forms show."""


def status_of(exc: QuorumError) -> int:
    """The status a refusal shown in a form gets (the API's for the same error)."""
    return next((code for cls, code in STATUS if isinstance(exc, cls)), 400)


def joinable(pool: pools.PoolView) -> bool:
    """Entries are open from creation until the deadline (upcoming or open)."""
    return pool.phase in ("upcoming", "open")


def _answer(request: Request, template: str, status: int = 200, **extra: Any) -> Response:
    """A pool page; ``no-store`` when someone is signed in (it carries their form token)."""
    signed_in = viewer(request)
    html = page_html(
        request,
        template,
        signed_in=signed_in,
        active="pools",
        credits=pool_view.fmt_credits,
        **extra,
    )
    return html_page(html, status_code=status, headers=PRIVATE if signed_in else None)


def _balance(request: Request, signed_in: SignedIn) -> int:
    return ledger.balance(context(request), ledger.account_holder(signed_in.account_id))


@router.get("/pools")
def pools_page(request: Request) -> Response:
    """Open, upcoming and ended pools."""

    def build() -> Response:
        ctx = context(request)
        now = ctx.now()
        return _answer(
            request,
            "pools.html",
            sections=pool_view.sections(pools.list_pools(ctx)),
            when=lambda pool: pool_view.time_left(pool, now),
            rule_text=pool_view.rule_text,
        )

    return _page(request, build)


def _form_page(
    request: Request,
    form: PoolForm | None = None,
    *,
    status: int = 200,
    problem: str | None = None,
    field: str | None = None,
) -> Response:
    ctx = context(request)
    signed_in = viewer(request)
    active = active_benchmarks(ctx)
    return _answer(
        request,
        "pool_new.html",
        status,
        form=form or PoolForm.defaults(ctx.now(), active),
        balance=_balance(request, signed_in) if signed_in else None,
        benchmarks=active,
        rules=RULES,
        rule_text=RULE_TEXT,
        rule_params=RULE_PARAMS,
        ties=TIE_POLICIES,
        tie_text=TIE_TEXT,
        kinds=MODEL_KINDS,
        kind_text=KIND_TEXT,
        period_max=PERIOD_HOURS_MAX,
        description_max=DESCRIPTION_MAX,
        problem=problem,
        field=field,
        # one pool per form however often it is posted (services/web_pools.py); a
        # refused post shows the same form again, still unused
        nonce=(form.nonce if form is not None and form.nonce else web_sessions.new_nonce()),
    )


@router.get("/pools/new")
def new_pool_page(request: Request) -> Response:
    """The create form (signed in) or a link to sign in."""
    return _page(request, lambda: _form_page(request))


@router.post("/pools/new")
def create_pool(request: Request, form: PostedForm) -> Response:
    """Create the pool the form describes (its funds move into escrow); then its page."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    ctx = context(request)
    count_write(ctx, signed_in.principal)
    typed = PoolForm.of(form)
    try:
        spec = typed.spec(
            now=ctx.now(),
            balance=_balance(request, signed_in),
            active=active_benchmarks(ctx),
            kinds=MODEL_KINDS,
            parse_size=parse_size,
        )
        made = create_pool_once(ctx, signed_in, form.one("nonce"), spec)
    except FormProblem as exc:
        return _form_page(request, typed, status=400, problem=exc.message, field=exc.field)
    except RateLimitedError:
        raise
    except QuorumError as exc:
        return _form_page(request, typed, status=status_of(exc), problem=exc.message)
    return RedirectResponse(f"/pools/{made}?created=1", status_code=303)


def _pool_page(
    request: Request,
    pool_id: int,
    *,
    status: int = 200,
    created: bool = False,
    joined: int | None = None,
    join_problem: str | None = None,
    chosen: str | None = None,
) -> Response:
    ctx = context(request)
    detail = pools.get_pool(ctx, pool_id)
    signed_in = viewer(request)
    entered = {e.model_id for e in detail.entries}
    own = []
    if signed_in is not None and joinable(detail.pool):
        own = [
            m.model
            for m in owned_models(ctx, signed_in.principal)
            if m.status != "retired" and m.model.id not in entered
        ]
    now = ctx.now()
    return _answer(
        request,
        "pool.html",
        status,
        detail=detail,
        p=detail.pool,
        lines=pool_view.board_lines(detail),
        history=pool_view.history(detail),
        phase_text=pool_view.PHASE_TEXT,
        rule_text=pool_view.rule_text,
        when=pool_view.time_left(detail.pool, now),
        period_text=pool_view.span_text(detail.pool.period_s),
        log_url=pool_view.log_entry_url(detail.payout_record),
        server_url=str(request.base_url).rstrip("/"),
        own_models=own,
        joinable=joinable(detail.pool),
        created=created,
        joined=next((e for e in detail.entries if e.id == joined), None),
        join_problem=join_problem,
        chosen=chosen,
    )


@router.get("/pools/{pool_id}")
def pool_page(
    request: Request,
    pool_id: PoolId,
    created: Annotated[bool, Query()] = False,
    joined: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> Response:
    """One pool; ``created`` and ``joined`` name what a form just did."""
    return _page(request, lambda: _pool_page(request, pool_id, created=created, joined=joined))


@router.post("/pools/{pool_id}/join")
def join_pool(request: Request, pool_id: PoolId, form: PostedForm) -> Response:
    """Enter one of the signed-in account's models; then the pool's page."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    ctx = context(request)
    count_write(ctx, signed_in.principal)
    model = (form.one("model") or "").strip()

    def refused(status: int, message: str) -> Response:
        return _page(
            request,
            lambda: _pool_page(request, pool_id, status=status, join_problem=message, chosen=model),
        )

    if not model or len(model) > 600:
        return refused(400, "Choose one of your models to enter.")
    try:
        entry = pools.join_pool(ctx, signed_in.principal, pool_id, model)
    except RateLimitedError:
        raise
    except QuorumError as exc:
        return refused(status_of(exc), exc.message)
    return RedirectResponse(f"/pools/{pool_id}?joined={entry.id}#entries", status_code=303)
