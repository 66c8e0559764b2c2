"""Personalized leaderboards: asks (a query or a plan, maybe the person's own
endpoints), answered from the cache first and by live evaluation when asked.

An ask is a plan (``core/plans.py``: made by the planner from a query, or given) and
what answers it: the cache of verified results (``services/ask_cache.py``), the live
evaluation of the person's own OpenAI-compatible endpoints (``services/live.py``) and,
when asked, deepening of thin public slices (``services/deepen.py``).

Statuses: an ask without endpoints is SUCCESS at once (the cache answers it on every
read). One with endpoints is PENDING until a worker takes it, STARTED while it runs
(``progress_done`` of ``progress_total`` requests), then SUCCESS or FAILURE with a
plain error. Endpoints (and deepening) need a signed-in account; an ask with
endpoints is its owner's alone (anyone else is told it does not exist). Keys are
held in memory by the process running the ask, never stored (``services/live.py``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from quorumbench.core.plans import Endpoint, Plan, PlanError, parse_plan
from quorumbench.db.ask_models import Ask as AskRow
from quorumbench.db.ask_models import StoredPlan
from quorumbench.db.models import Account
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    InvalidPlanError,
    NotFoundError,
    QuorumError,
    RateLimitedError,
)
from quorumbench.planner import CatalogEntry, Match, PlannerReport, PlannerSettings, plan_query
from quorumbench.services import ask_cache
from quorumbench.services import deepen as deepen_service
from quorumbench.services.ask_cache import CacheAnswer
from quorumbench.services.benchmarks import list_benchmarks
from quorumbench.services.context import ServerContext
from quorumbench.services.live import (
    KEY_NOT_KEPT,
    NOT_CROSS_CHECKED,
    AskStatus,
    EndpointRequest,
    EndpointRow,
    LiveJob,
    fail,
    pool_for,
)

__all__ = [
    "KEY_NOT_KEPT",
    "NOT_CROSS_CHECKED",
    "AskBoard",
    "AskStatus",
    "AskView",
    "EndpointRequest",
    "EndpointRow",
    "board",
    "catalog",
    "create",
    "live_rows",
    "plan_board",
    "preview",
    "view",
]

MAX_QUERY = 2000
"""Longest query an ask keeps (characters)."""


@dataclass(frozen=True)
class AskView:
    id: str
    status: AskStatus
    plan: Plan
    plan_id: str
    report: PlannerReport | None
    """How the query became the plan (None when a plan was given)."""
    progress_done: int
    progress_total: int
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    owner_id: int | None
    deepen: Mapping[str, Any] | None = None
    """Deepening of thin slices for public models (services/deepen.py), if asked."""
    query: str | None = None
    started_at: datetime | None = None
    samples_cap: int | None = None
    """Samples per endpoint this ask evaluates (the plan's budget, capped by
    ``QB_ASK_MAX_SAMPLES``); None without endpoints."""


@dataclass(frozen=True)
class AskBoard:
    ask: AskView
    cache: CacheAnswer
    endpoints: list[EndpointRow] = field(default_factory=list)


def catalog(ctx: ServerContext) -> list[CatalogEntry]:
    """The active benchmarks a plan may name, with their versions and pillars."""
    return [
        CatalogEntry(row.name, row.version, row.pillar)
        for row in list_benchmarks(ctx)
        if row.active
    ]


def planner_settings(ctx: ServerContext) -> PlannerSettings | None:
    """The operator's LLM planner (``QB_ASK_PLANNER_*``), None when not configured."""
    settings = ctx.settings
    if not settings.ask_planner_url or not settings.ask_planner_model:
        return None
    key = settings.ask_planner_api_key
    return PlannerSettings(
        llm_url=settings.ask_planner_url,
        llm_model=settings.ask_planner_model,
        llm_api_key=key.get_secret_value() if key else None,
        timeout_s=settings.ask_planner_timeout_s,
    )


def preview(ctx: ServerContext, query: str) -> PlannerReport:
    """The plan the planner makes of ``query`` (nothing stored, nothing run)."""
    return plan_query(_query(query), catalog(ctx), planner_settings(ctx))


def _query(query: str) -> str:
    text = query.strip()
    if not text:
        raise InvalidPlanError("the query is empty: say what the board should rank models on")
    if len(text) > MAX_QUERY:
        raise InvalidPlanError(f"the query has {len(text)} characters; at most {MAX_QUERY}")
    return text


def _parse(data: Any) -> Plan:
    try:
        return parse_plan(data)
    except PlanError as exc:
        raise InvalidPlanError(f"the plan is not valid: {exc}") from None


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidPlanError(
            f"endpoint {parts.scheme}://{parts.hostname}{parts.path}: the URL may carry no "
            "query, fragment or credentials (send the key as api_key; it is never stored)"
        )


def _with_endpoints(plan: Plan, endpoints: Sequence[EndpointRequest]) -> Plan:
    """The plan with the request's endpoints added (the plan's own ones kept)."""
    merged = [{"url": e.url, "model": e.model} for e in plan.endpoints]
    for endpoint in endpoints:
        item = {"url": endpoint.url, "model": endpoint.model}
        if item not in merged:
            merged.append(item)
    if not merged:
        return plan
    full = _parse({**plan.as_json(), "endpoints": merged})
    for endpoint_ in full.endpoints:
        _check_url(endpoint_.url)
    return full


def _keyed(plan: Plan, endpoints: Sequence[EndpointRequest]) -> tuple[EndpointRequest, ...]:
    keys = {(e.url, e.model): e.api_key for e in endpoints}
    return tuple(
        EndpointRequest(e.url, e.model, keys.get((e.url, e.model))) for e in plan.endpoints
    )


def _check_live(ctx: ServerContext) -> None:
    if ctx.settings.ask_workers < 1:
        raise ConfigError("this server evaluates no endpoints (QB_ASK_WORKERS is 0)")
    pool_for(ctx).check_room()


def _count_live(ctx: ServerContext, session: Session, owner_id: int) -> None:
    """RateLimitedError past ``QB_ASK_PER_ACCOUNT``; in the ask's write transaction,
    with the account's row locked, so that concurrent asks cannot pass it together."""
    settings = ctx.settings
    session.execute(select(Account.id).where(Account.id == owner_id).with_for_update())
    since = ctx.now() - timedelta(hours=settings.ask_window_hours)
    recent = session.scalars(
        select(AskRow.created_at)
        .where(AskRow.owner_id == owner_id, AskRow.created_at > since, AskRow.n_endpoints > 0)
        .order_by(AskRow.created_at)
    ).all()
    if len(recent) >= settings.ask_per_account:
        retry = None
        if recent:
            wait = recent[0] + timedelta(hours=settings.ask_window_hours) - ctx.now()
            retry = max(1, int(wait.total_seconds()) + 1)
        raise RateLimitedError(
            f"{len(recent)} asks with endpoints in the last {settings.ask_window_hours:g} h: "
            f"the most an account may make (QB_ASK_PER_ACCOUNT is {settings.ask_per_account})",
            retry,
        )


def _store_plan(ctx: ServerContext, session: Session, public: Plan) -> None:
    statement = ctx.db.insert(StoredPlan).values(
        id=public.id, plan=public.as_json(), created_at=ctx.now()
    )
    session.execute(statement.on_conflict_do_nothing(index_elements=["id"]))


def _report_json(report: PlannerReport) -> dict[str, Any]:
    return {
        "query": report.query,
        "language": report.language,
        "matches": [
            {
                "text": m.text,
                "key": m.key,
                "value": m.value,
                "confidence": m.confidence,
                "how": m.how,
            }
            for m in report.matches
        ],
        "unmapped": list(report.unmapped),
        "planner": report.planner,
        "fallback": report.fallback,
    }


def _report(data: Mapping[str, Any] | None, plan: Plan) -> PlannerReport | None:
    if data is None:
        return None
    return PlannerReport(
        plan=plan,
        query=data["query"],
        language=data.get("language"),
        matches=tuple(Match(**m) for m in data.get("matches", ())),
        unmapped=tuple(data.get("unmapped", ())),
        planner=data["planner"],
        fallback=data.get("fallback"),
    )


def samples_cap(ctx: ServerContext, plan: Plan) -> int:
    """Samples per endpoint an ask of ``plan`` evaluates."""
    return min(plan.budget, ctx.settings.ask_max_samples)


def create(
    ctx: ServerContext,
    *,
    owner_id: int | None,
    query: str | None = None,
    plan: Mapping[str, Any] | None = None,
    endpoints: Sequence[EndpointRequest] = (),
    deepen: bool = False,
) -> AskView:
    """Store an ask (and its public plan), answer from the cache, start live work.

    With ``plan`` the plan is used as given (``query``, if any, is kept as its text);
    else the planner makes it from ``query``. ``endpoints`` are added to the plan's.
    """
    report: PlannerReport | None = None
    text = _query(query) if query is not None else None
    if plan is not None:
        made = _parse(plan)
    elif text is not None:
        report = plan_query(text, catalog(ctx), planner_settings(ctx))
        made = report.plan
    else:
        raise InvalidPlanError("an ask needs a query or a plan")
    full = _with_endpoints(made, endpoints)
    keyed = _keyed(full, endpoints)
    if (keyed or deepen) and owner_id is None:
        raise AuthenticationError(
            "asking with endpoints or deepening needs a signed-in account (Authorization: Bearer …)"
        )
    if keyed:
        _check_live(ctx)
        if deepen and owner_id is not None:  # before deepening schedules anything
            with ctx.db.read() as session:
                _count_live(ctx, session, owner_id)
    public = full.public()
    ask_id = secrets.token_urlsafe(18)
    now = ctx.now()
    status = AskStatus.PENDING if keyed else AskStatus.SUCCESS
    deepened = dict(deepen_service.request(ctx, public, owner_id)) if deepen and owner_id else None
    with ctx.db.write() as session:
        if keyed and owner_id is not None:
            _count_live(ctx, session, owner_id)
        _store_plan(ctx, session, public)
        session.add(
            AskRow(
                id=ask_id,
                owner_id=owner_id,
                plan_id=public.id,
                query=text,
                report=_report_json(report) if report else None,
                endpoints=[{"url": e.url, "model": e.model} for e in full.endpoints],
                n_endpoints=len(full.endpoints),
                status=status.value,
                progress_done=0,
                progress_total=0,
                error=None,
                results=None,
                deepen=deepened,
                created_at=now,
                started_at=None,
                finished_at=None if keyed else now,
            )
        )
    if keyed:
        try:
            pool_for(ctx).submit(LiveJob(ask_id, full, keyed, samples_cap(ctx, full)))
        except QuorumError as exc:
            fail(ctx, ask_id, exc.message)
            raise
    return view(ctx, ask_id, owner_id)


def _row(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> tuple[AskRow, Plan]:
    with ctx.db.read() as session:
        row = session.get(AskRow, ask_id) if len(ask_id) <= 64 else None
        stored = session.get(StoredPlan, row.plan_id) if row is not None else None
    if row is None or stored is None or (row.endpoints and row.owner_id != viewer_id):
        raise NotFoundError(f"no ask {ask_id!r} (an ask with endpoints is its owner's alone)")
    public = parse_plan(stored.plan)
    endpoints = tuple(Endpoint(e["url"], e["model"]) for e in row.endpoints)
    plan = Plan(
        public.labels,
        public.pillars,
        public.benchmarks,
        public.models,
        endpoints,
        public.budget,
        public.versions,
    )
    return row, plan


def view(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> AskView:
    row, plan = _row(ctx, ask_id, viewer_id)
    deepened: Mapping[str, Any] | None = None
    if row.deepen is not None:
        deepened = {
            "requested": row.deepen,
            "progress": dict(deepen_service.progress(ctx, row.plan_id)),
        }
    return AskView(
        id=row.id,
        status=AskStatus(row.status),
        plan=plan,
        plan_id=row.plan_id,
        report=_report(row.report, plan.public()),
        progress_done=row.progress_done,
        progress_total=row.progress_total,
        error=row.error,
        created_at=row.created_at,
        finished_at=row.finished_at,
        owner_id=row.owner_id,
        deepen=deepened,
        query=row.query,
        started_at=row.started_at,
        samples_cap=samples_cap(ctx, plan) if plan.endpoints else None,
    )


def _endpoint_rows(ask: AskView, results: Sequence[Mapping[str, Any]] | None) -> list[EndpointRow]:
    if results:
        return [EndpointRow.from_json(dict(r)) for r in results]
    status = ask.status if ask.status is not AskStatus.SUCCESS else AskStatus.FAILURE
    return [
        EndpointRow(e.url, e.model, status, 0, None, None, None, {}, ask.error)
        for e in ask.plan.endpoints
    ]


def live_rows(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> list[EndpointRow]:
    """The ask's endpoint rows: their results once it ended, else their status (one
    evaluation each, not cross-checked; the owner's eyes only)."""
    ask = view(ctx, ask_id, viewer_id)
    with ctx.db.read() as session:
        results = session.scalar(select(AskRow.results).where(AskRow.id == ask_id))
    return _endpoint_rows(ask, results)


def board(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> AskBoard:
    """The ask's answer: the cache's board for its public plan, and its endpoints'
    live rows (:func:`live_rows`)."""
    ask = view(ctx, ask_id, viewer_id)
    with ctx.db.read() as session:
        results = session.scalar(select(AskRow.results).where(AskRow.id == ask_id))
        cache = ask_cache.answer(ctx, session, ask.plan.public())
    return AskBoard(ask, cache, _endpoint_rows(ask, results))


def plan_board(ctx: ServerContext, plan_id: str) -> tuple[Plan, CacheAnswer]:
    """A stored public plan (by id, the shareable URL) and its cache answer."""
    with ctx.db.read() as session:
        stored = session.get(StoredPlan, plan_id) if len(plan_id) == 64 else None
        if stored is None:
            raise NotFoundError(f"no plan {plan_id!r}")
        plan = parse_plan(stored.plan)
        return plan, ask_cache.answer(ctx, session, plan)
