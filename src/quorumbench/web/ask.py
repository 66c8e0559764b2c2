"""Asking on the site: ``/ask`` and ``/asks/{id}``.

* ``GET /ask`` shows the query box; ``GET /ask?q=…`` the plan the planner makes of it
  (``services/asks.preview``, nothing stored or run) as an editable form
  (``ask_form.py``), each chip with the words of the query that chose it.
* ``POST /ask`` takes the edited form: ``action=update`` shows it back as the plan it
  now is; otherwise the ask is made (``services/asks.create``) and the browser is
  sent (303) to its answer: ``/ask?plan=<id>``, the public plan's shareable board, or
  ``/asks/<id>`` when it has the person's own endpoint or deepens thin slices. A
  signed-in person's form carries the session's CSRF token; an endpoint and deepening
  need one to be signed in. An endpoint's API key comes only in this POST body: it is
  handed to the service as a ``SecretStr`` and never written into a page, a URL or a
  redirect.
* ``GET /ask?plan=<id>`` is a public plan's board (``services/asks.plan_board``).
* ``GET /asks/<id>`` is one ask (its owner's only, when it has endpoints): status,
  progress, the board with the endpoint's rows marked "not cross-checked", deepening.
  ``GET /asks/<id>/progress`` is the JSON its poller (``site.js``) reads with the
  session cookie; without JavaScript a refresh link does the same.

Boards also answer ``?format=json`` and ``?format=csv``. A refused plan is shown back
in the form with its message (422, as the API answers it), as are the asks service's
refusals of the input; other errors are the site's error page.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import SecretStr

from quorumbench.core.plans import MAX_BUDGET, Plan, PlanError, parse_plan
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    InvalidSpecError,
    ModelLoadError,
    NotFoundError,
)
from quorumbench.services import asks, web_sessions
from quorumbench.services.ask_cache import CacheAnswer
from quorumbench.services.asks import AskBoard, AskStatus, AskView, EndpointRequest
from quorumbench.services.board import active_benchmarks
from quorumbench.services.ratelimit import count_write
from quorumbench.services.web_sessions import SignedIn
from quorumbench.web import ask_view
from quorumbench.web.ask_form import (
    KINDS,
    MAX_QUERY,
    SELECT_LABELS,
    EndpointFields,
    FormState,
    How,
    chip_groups,
)
from quorumbench.web.routes import html_page, page_html
from quorumbench.web.session import Form, PostedForm, context, lookup, viewer
from quorumbench.web.signin import PRIVATE

router = APIRouter(include_in_schema=False)
Format = Literal["html", "json", "csv"]
_PLAN_ID = re.compile(r"^[0-9a-f]{64}$")
_ASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
POLL_SECONDS = 2
DEEPEN_POLL_SECONDS = 15
"""Deepening waits on runners (minutes): its counts are polled less often."""


def _checked_plan_id(plan_id: str) -> str:
    if not _PLAN_ID.match(plan_id):
        raise ConfigError(f"plan={plan_id[:80]!r}: a plan id is 64 lowercase hex digits")
    return plan_id


def _checked_ask_id(ask_id: str) -> str:
    if not _ASK_ID.match(ask_id):
        raise ConfigError("that is not an ask id")
    return ask_id


def _answer(request: Request, template: str, status: int = 200, **extra: Any) -> Response:
    """A page; ``no-store`` when someone is signed in (it may show their form's token or
    their own ask)."""
    signed_in = viewer(request)
    html = page_html(request, template, signed_in=signed_in, active="ask", **extra)
    return html_page(html, status_code=status, headers=PRIVATE if signed_in else None)


def _form_context(
    request: Request,
    state: FormState,
    how: How,
    *,
    plan: Plan | None = None,
    problem: str | None = None,
    endpoint: EndpointFields | None = None,
) -> dict[str, Any]:
    """What the plan form (``_ask_plan_form.html``) shows."""
    return {
        "state": state,
        "how": how,
        "groups": chip_groups(state, how, active_benchmarks(context(request))),
        "select_labels": SELECT_LABELS,
        "kinds": KINDS,
        "max_budget": MAX_BUDGET,
        "plan": plan,
        "problem": problem,
        "endpoint": endpoint or EndpointFields(),
    }


def _plan_doc(request: Request, plan: Plan) -> dict[str, Any]:
    """The plan as JSON and YAML, its id and shareable URL (of the public plan)."""
    public = plan.public()
    return {
        "plan_id": public.id,
        "plan_json": ask_view.plan_json_text(public),
        "plan_yaml": ask_view.plan_yaml_text(public),
        "share_url": f"{str(request.base_url).rstrip('/')}/ask?plan={public.id}",
    }


def _board_context(
    request: Request, plan: Plan, rows: list[ask_view.Row], answer: CacheAnswer
) -> dict[str, Any]:
    now = context(request).now()
    return {
        "rows": rows,
        "ago": lambda then: ask_view.ago(then, now),
        "thin": sum(1 for r in rows if r.thin and not r.endpoint),
        "covered": answer.benchmarks,
        "budget": plan.budget,
    }


@router.get("/ask")
def ask_page(
    request: Request,
    q: Annotated[str | None, Query(max_length=2 * MAX_QUERY)] = None,
    plan: Annotated[str | None, Query(max_length=100)] = None,
    format: Format = "html",
) -> Response:
    """The query box; with ``q`` the plan of it to edit; with ``plan`` a public board."""
    ctx = context(request)
    if plan:
        found, answer = asks.plan_board(ctx, _checked_plan_id(plan))
        rows = ask_view.cache_rows(answer)
        if format == "json":
            return JSONResponse(ask_view.board_json(found, rows))
        if format == "csv":
            return _csv(ask_view.board_csv(rows), f"ask-{found.public().id[:12]}")
        return _answer(
            request,
            "ask.html",
            query="",
            data_path=f"/ask?plan={found.public().id}",
            **_board_context(request, found, rows, answer),
            **_plan_doc(request, found),
            **_form_context(request, FormState.of_plan(found), How(), plan=found),
        )
    if format != "html":
        raise ConfigError("only a plan's board (plan=<id>) comes as JSON or CSV")
    query = (q or "").strip()
    if not query:
        problem = "Type a question first." if q is not None else None
        return _answer(request, "ask.html", 400 if problem else 200, query="", problem=problem)
    if len(query) > MAX_QUERY:
        problem = f"A question is at most {MAX_QUERY} characters; this one has {len(query)}."
        return _answer(request, "ask.html", 400, query=query[:MAX_QUERY], problem=problem)
    report = asks.preview(ctx, query)
    return _answer(
        request,
        "ask.html",
        query=query,
        **_plan_doc(request, report.plan),
        **_form_context(request, FormState.of_plan(report.plan), How.of(report), plan=report.plan),
    )


def _posted_plan(form: Form) -> tuple[FormState, dict[str, Any]]:
    """The plan the form posts: ``plan_json`` (the deepen button's) or the chips."""
    raw = form.one("plan_json")
    if raw is not None:
        try:
            data = json.loads(raw)
        except ValueError:
            raise PlanError("the plan is not readable JSON") from None
        return FormState.of_plan(parse_plan(data)), data
    state = FormState.of_form(form)
    return state, state.plan_json()


def _signed_in_for(request: Request, form: Form, needs: str | None) -> SignedIn | None:
    """The signed-in session (CSRF checked, the write counted), None for a signed-out
    ask; an endpoint or deepening (``needs``) is refused without one."""
    signed_in = lookup(request).session
    if signed_in is None:
        if needs:
            raise AuthenticationError(f"Sign in first to {needs}. Nothing was asked.")
        return None
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    count_write(context(request), signed_in.principal)
    return signed_in


@router.post("/ask")
def post_ask(request: Request, form: PostedForm) -> Response:
    """Show the edited plan back (``action=update``), or ask it and go to the answer."""
    how = How.parse(form.one("how"))
    endpoint = EndpointFields.of(form)
    deepen = form.one("deepen") == "1"
    state = FormState.of_form(form)
    query = (form.one("q") or "").strip()[:MAX_QUERY]

    def refused(message: str, status: int = 422) -> Response:
        return _answer(
            request,
            "ask.html",
            status,
            query=query,
            **_form_context(request, state, how, problem=message, endpoint=endpoint),
        )

    try:
        state, data = _posted_plan(form)
        plan = parse_plan(data)
    except PlanError as exc:
        return refused(f"This plan cannot be asked: {exc}")
    if form.one("action") == "update":
        return _answer(
            request,
            "ask.html",
            query=query,
            **_plan_doc(request, plan),
            **_form_context(request, state, how, plan=plan, endpoint=endpoint),
        )
    needs = "ask with your own endpoint" if endpoint.given else None
    needs = needs or ("deepen a plan's thin slices" if deepen else None)
    signed_in = _signed_in_for(request, form, needs)
    problem = endpoint.problem()
    if problem is not None:
        return refused(problem, 400)
    endpoints = []
    if endpoint.given:
        key = form.one("endpoint_key") or ""
        endpoints.append(
            EndpointRequest(endpoint.url, endpoint.model, SecretStr(key) if key else None)
        )
    try:
        made = asks.create(
            context(request),
            owner_id=signed_in.account_id if signed_in else None,
            query=None,
            plan=data,
            endpoints=endpoints,
            deepen=deepen,
        )
    except PlanError as exc:
        return refused(f"This plan cannot be asked: {exc}")
    except (InvalidSpecError, ModelLoadError) as exc:  # the plan, an endpoint's address
        return refused(exc.message)
    except ConfigError as exc:  # e.g. this server evaluates no endpoints
        return refused(exc.message, 400)
    except NotFoundError as exc:
        if not deepen:
            raise
        return refused(f"Nothing to deepen: {exc.message}", 404)
    if endpoints or deepen:
        return RedirectResponse(f"/asks/{made.id}", status_code=303)
    return RedirectResponse(f"/ask?plan={made.plan.public().id}", status_code=303)


def _csv(text: str, name: str) -> Response:
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"', **PRIVATE},
    )


def _viewer_id(request: Request) -> int | None:
    signed_in = viewer(request)
    return signed_in.account_id if signed_in else None


@router.get("/asks/{ask_id}")
def ask_status_page(
    request: Request,
    ask_id: Annotated[str, Path(max_length=64)],
    format: Format = "html",
) -> Response:
    """One ask: status, progress, its board, its deepening (its owner's, if private)."""
    ctx = context(request)
    found: AskBoard = asks.board(ctx, _checked_ask_id(ask_id), _viewer_id(request))
    view = found.ask
    rows = ask_view.cache_rows(found.cache) + ask_view.endpoint_rows(
        found.endpoints, view, view.plan.budget
    )
    if format == "json":
        return JSONResponse(ask_view.board_json(view.plan, rows, view), headers=PRIVATE)
    if format == "csv":
        return _csv(ask_view.board_csv(rows), f"ask-{view.id}")
    running = view.status in (AskStatus.PENDING, AskStatus.STARTED)
    deepening = _deepening(view)
    deepen_state = "none"
    if deepening is not None:
        deepen_state = "finished" if deepening["finished"] else "running"
    html = page_html(
        request,
        "asks.html",
        signed_in=viewer(request),
        view=view,
        running=running,
        deepening=deepening,
        deepen_state=deepen_state,
        watching=running or deepen_state == "running",
        poll_url=f"/asks/{view.id}/progress",
        poll_seconds=POLL_SECONDS if running else DEEPEN_POLL_SECONDS,
        data_path=f"/asks/{view.id}",
        active="ask",
        **_board_context(request, view.plan, rows, found.cache),
        **_plan_doc(request, view.plan),
    )
    return html_page(html, headers=PRIVATE)


def _deepening(view: AskView) -> dict[str, Any] | None:
    """The deepening asked with the ask (``services/deepen.py``: what was ``requested``,
    its ``progress``) as the page shows it: the counts, each model's, what was skipped."""
    if not view.deepen:
        return None
    progress = view.deepen.get("progress") or {}
    requested = view.deepen.get("requested") or {}
    counts = [
        (key, key.replace("_", " "), value)
        for key, value in progress.items()
        if key not in ("plan_id", "models", "finished") and isinstance(value, int | float | str)
    ]
    return {
        "counts": counts,
        "finished": bool(progress.get("finished")),
        "models": list(progress.get("models") or []),
        "skipped": list(requested.get("skipped") or []),
        "tasks": requested.get("tasks"),
        "samples": requested.get("samples"),
    }


@router.get("/asks/{ask_id}/progress")
def ask_progress(request: Request, ask_id: Annotated[str, Path(max_length=64)]) -> Response:
    """Status and progress as JSON, for the page's poller (the session's cookie)."""
    view = asks.view(context(request), _checked_ask_id(ask_id), _viewer_id(request))
    return JSONResponse(ask_view.progress_json(view), headers=PRIVATE)
