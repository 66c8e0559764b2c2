"""Asks: a question or a plan in, a personalized board out (``services/asks.py``)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import Response

from quorumbench.api.ask_schemas import (
    AskBoardOut,
    AskIn,
    AskOut,
    EndpointRowOut,
    MatchOut,
    PlanBoardOut,
    ReportOut,
    SliceRowOut,
)
from quorumbench.api.deps import Context
from quorumbench.services import asks
from quorumbench.services.accounts import Principal
from quorumbench.services.ask_cache import CacheAnswer
from quorumbench.services.ratelimit import count_write
from quorumbench.services.sessions import authenticate

router = APIRouter(prefix="/v0", tags=["asks"])
AskId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{8,64}$", description="The ask's id.")]
PlanId = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="The plan's SHA-256.")]
CSV_COLUMNS = [
    "rank",
    "model",
    "score",
    "ci_low",
    "ci_high",
    "n_samples",
    "benchmarks",
    "updated_at",
    "cross_checked",
]
"""The board's CSV: one row per model, then one per endpoint (rank empty)."""
_CSV = {
    200: {
        "description": "The board as JSON, or as CSV (``format=csv`` or ``Accept: text/csv``; "
        f"columns {', '.join(CSV_COLUMNS)}).",
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }
}


OPTIONAL_BEARER: dict[str, Any] = {"security": [{}, {"bearer": []}]}
"""These operations take a bearer credential when there is one (an ask with endpoints
is its owner's), and answer without one too."""


def _viewer(ctx: Context, request: Request) -> Principal | None:
    """The signed-in caller, or None without a credential (a bad one is refused)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    return authenticate(ctx, token) if token else None


def _ask_out(ask: asks.AskView) -> AskOut:
    report = None
    if ask.report is not None:
        report = ReportOut(
            query=ask.report.query,
            language=ask.report.language,
            matches=[MatchOut(**m.__dict__) for m in ask.report.matches],
            unmapped=list(ask.report.unmapped),
            planner=ask.report.planner,
            fallback=ask.report.fallback,
        )
    return AskOut(
        id=ask.id,
        status=ask.status.value,
        plan_id=ask.plan_id,
        plan=ask.plan.as_json(),
        query=ask.query,
        report=report,
        progress_done=ask.progress_done,
        progress_total=ask.progress_total,
        error=ask.error,
        created_at=ask.created_at,
        started_at=ask.started_at,
        finished_at=ask.finished_at,
        samples_cap=ask.samples_cap,
        deepen=dict(ask.deepen) if ask.deepen is not None else None,
    )


def _rows(cache: CacheAnswer) -> list[SliceRowOut]:
    return [
        SliceRowOut(
            rank=r.rank,
            rank_best=r.best,
            rank_worst=r.worst,
            model_id=r.model_id,
            model=r.name,
            ref=r.ref,
            score=r.score,
            ci_low=r.ci_low,
            ci_high=r.ci_high,
            n_samples=r.n_samples,
            benchmarks=dict(r.benchmarks),
            chance=r.chance,
            updated_at=r.updated_at,
            thin=r.thin,
        )
        for r in cache.rows
    ]


def _wants_csv(request: Request, format: str | None) -> bool:
    if format is not None:
        return format == "csv"
    return "text/csv" in request.headers.get("accept", "")


def _csv(rows: list[SliceRowOut], endpoints: list[EndpointRowOut]) -> Response:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                "rank": row.rank,
                "model": row.model,
                "score": row.score,
                "ci_low": row.ci_low,
                "ci_high": row.ci_high,
                "n_samples": row.n_samples,
                "benchmarks": " ".join(f"{k}:{v}" for k, v in sorted(row.benchmarks.items())),
                "updated_at": row.updated_at.isoformat(),
                "cross_checked": "yes",
            }
        )
    for end in endpoints:
        writer.writerow(
            {
                "rank": "",
                "model": f"{end.model} ({end.url})",
                "score": "" if end.score is None else end.score,
                "ci_low": "" if end.ci_low is None else end.ci_low,
                "ci_high": "" if end.ci_high is None else end.ci_high,
                "n_samples": end.n_samples,
                "benchmarks": " ".join(f"{k}:{v}" for k, v in sorted(end.benchmarks.items())),
                "updated_at": "",
                "cross_checked": f"no: {end.note}",
            }
        )
    return Response(buffer.getvalue(), media_type="text/csv; charset=utf-8")


@router.post(
    "/asks",
    status_code=status.HTTP_201_CREATED,
    response_model=AskOut,
    openapi_extra=OPTIONAL_BEARER,
)
def create_ask(body: AskIn, ctx: Context, request: Request) -> AskOut:
    """Ask: a query (the planner makes the plan) or a plan (used as given), optionally
    your own endpoints with their keys (evaluated live by this server, PENDING →
    STARTED → SUCCESS or FAILURE; poll ``GET /v0/asks/{id}``) and ``deepen``.
    Endpoints and deepening need a signed-in account; keys are never stored, logged or
    answered. An ask without endpoints is SUCCESS at once: its board is the cache's."""
    principal = _viewer(ctx, request)
    if principal is not None:
        count_write(ctx, principal)
    made = asks.create(
        ctx,
        owner_id=principal.account_id if principal else None,
        query=body.query,
        plan=body.plan,
        endpoints=[asks.EndpointRequest(e.url, e.model, e.api_key) for e in body.endpoints],
        deepen=body.deepen,
    )
    return _ask_out(made)


@router.get("/asks/{ask_id}", response_model=AskOut, openapi_extra=OPTIONAL_BEARER)
def get_ask(ask_id: AskId, ctx: Context, request: Request) -> AskOut:
    """An ask's status, progress, plan and planner report. An ask with endpoints is
    its owner's alone: anyone else gets 404."""
    principal = _viewer(ctx, request)
    return _ask_out(asks.view(ctx, ask_id, principal.account_id if principal else None))


def _endpoint_out(row: asks.EndpointRow) -> EndpointRowOut:
    return EndpointRowOut(
        url=row.url,
        model=row.model,
        status=row.status.value,
        score=row.score,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        n_samples=row.n_samples,
        benchmarks=dict(row.benchmarks),
        skipped=dict(row.skipped),
        error=row.error,
        note=row.note,
    )


@router.get(
    "/asks/{ask_id}/board",
    response_model=AskBoardOut,
    responses=_CSV,  # type: ignore[arg-type]
    openapi_extra=OPTIONAL_BEARER,
)
def get_ask_board(
    ask_id: AskId,
    request: Request,
    ctx: Context,
    format: Literal["json", "csv"] | None = Query(
        None, description="csv for a spreadsheet (or send Accept: text/csv)."
    ),
) -> Any:
    """The ask's board: the public models' verified scores on the plan's slice (ranked,
    95% intervals, samples, benchmarks, freshness, thin slices marked), and your
    endpoints' live rows, labelled one evaluation, not cross-checked."""
    principal = _viewer(ctx, request)
    found = asks.board(ctx, ask_id, principal.account_id if principal else None)
    rows = _rows(found.cache)
    endpoints = [_endpoint_out(e) for e in found.endpoints]
    if _wants_csv(request, format):
        return _csv(rows, endpoints)
    return AskBoardOut(
        plan_id=found.ask.plan_id,
        plan=found.ask.plan.public().as_json(),
        benchmarks=list(found.cache.benchmarks),
        label_sets=found.cache.label_sets,
        rows=rows,
        ask=_ask_out(found.ask),
        endpoints=endpoints,
    )


@router.get("/plans/{plan_id}", response_model=PlanBoardOut, responses=_CSV)  # type: ignore[arg-type]
def get_plan(
    plan_id: PlanId,
    request: Request,
    ctx: Context,
    format: Literal["json", "csv"] | None = Query(
        None, description="csv for a spreadsheet (or send Accept: text/csv)."
    ),
) -> Any:
    """A stored public plan (its id is the SHA-256 of its canonical JSON: the
    shareable URL) and its board from the cache of verified results."""
    plan, cache = asks.plan_board(ctx, plan_id)
    rows = _rows(cache)
    if _wants_csv(request, format):
        return _csv(rows, [])
    return PlanBoardOut(
        plan_id=plan.id,
        plan=plan.as_json(),
        benchmarks=list(cache.benchmarks),
        label_sets=cache.label_sets,
        rows=rows,
    )
