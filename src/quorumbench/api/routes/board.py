"""Leaderboard, tasks, epochs and benchmarks (public reads)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from quorumbench.api.deps import Context
from quorumbench.api.params import MAX_INT, PLAIN_TEXT, RowId
from quorumbench.api.schemas import (
    BenchmarkOut,
    EpochOut,
    IntervalOut,
    LeaderboardOut,
    LeaderboardRowOut,
)
from quorumbench.core.leaderboard import Interval
from quorumbench.core.taxonomy import PILLARS
from quorumbench.protocol import BENCHMARK_NAME_PATTERN, TaskStatus
from quorumbench.services import benchmarks, epochs
from quorumbench.services import tasks as task_service
from quorumbench.services.leaderboard import Row, SortKey, leaderboard

router = APIRouter(prefix="/v0", tags=["leaderboard"])
_NESTED = ("normalised", "pillars", "missing_pillars")
CSV_COLUMNS = [
    *(f for f in LeaderboardRowOut.model_fields if f not in _NESTED),
    "normalised",
    "normalised_ci_low",
    "normalised_ci_high",
    *(f"{p}_{k}" for p in PILLARS for k in ("score", "ci_low", "ci_high")),
    "missing_pillars",
]
"""The CSV's columns: the row's, with the nested ones flattened."""


def _csv_row(row: LeaderboardRowOut) -> dict[str, Any]:
    flat = row.model_dump(mode="json", exclude=set(_NESTED))
    if row.normalised is not None:
        flat["normalised"] = row.normalised.score
        flat["normalised_ci_low"] = row.normalised.ci_low
        flat["normalised_ci_high"] = row.normalised.ci_high
    for pillar, value in (row.pillars or {}).items():
        flat.update({f"{pillar}_{k}": getattr(value, k) for k in ("score", "ci_low", "ci_high")})
    flat["missing_pillars"] = " ".join(row.missing_pillars)
    return flat


def _row_out(row: Row) -> LeaderboardRowOut:
    fields = {**row.__dict__, "missing_pillars": list(row.missing_pillars)}
    fields["normalised"] = _interval(row.normalised) if row.normalised else None
    if row.pillars is not None:
        fields["pillars"] = {p: _interval(v) for p, v in row.pillars.items()}
    return LeaderboardRowOut(**fields)


def _interval(value: Interval) -> IntervalOut:
    return IntervalOut(
        score=value.score, stderr=value.stderr, ci_low=value.ci_low, ci_high=value.ci_high
    )


@router.get(
    "/leaderboard",
    response_model=LeaderboardOut,
    responses={
        200: {
            "description": "The board as JSON, or with ``format=csv`` one CSV row per model "
            f"(columns {', '.join(CSV_COLUMNS)}).",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        }
    },
)
def get_leaderboard(
    ctx: Context,
    benchmark: str | None = Query(
        None,
        pattern=BENCHMARK_NAME_PATTERN,
        description="A benchmark name; omit for the aggregate.",
    ),
    sort: SortKey = "score",
    order: Literal["asc", "desc"] = "desc",
    min_samples: int = Query(0, ge=0, le=MAX_INT),
    q: str | None = Query(
        None, max_length=100, pattern=PLAIN_TEXT, description="Model name contains."
    ),
    limit: int = Query(50, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=MAX_INT),
    format: Literal["json", "csv"] = "json",
    unranked: bool = Query(
        False,
        description="The aggregate only: also list the models without a score on every "
        "pillar of positive weight (rank null, missing_pillars says which).",
    ),
) -> Any:
    """The ranking with 95% intervals and each model's rank on the whole board (``rank``,
    ``rank_best``, ``rank_worst``: sorting, ``q``, ``min_samples`` and paging never
    change them); ``format=csv`` for a spreadsheet. A benchmark's rows carry the raw
    score and the chance-corrected one (``normalised``, with ``chance``); the
    aggregate's, the pillar scores it is the weighted mean of."""
    page = leaderboard(
        ctx,
        benchmark=benchmark,
        sort=sort,
        descending=order == "desc",
        min_samples=min_samples,
        model_query=q,
        limit=limit,
        offset=offset,
        unranked=unranked,
    )
    rows = [_row_out(r) for r in page.rows]
    if format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(_csv_row(row))
        return Response(buffer.getvalue(), media_type="text/csv; charset=utf-8")
    return LeaderboardOut(total=page.total, limit=limit, offset=offset, rows=rows)


@router.get("/tasks")
def list_tasks(
    ctx: Context,
    status: Annotated[TaskStatus | None, Query(description="Only tasks with this status.")] = None,
    model_id: int | None = Query(None, ge=1, le=MAX_INT),
    benchmark: str | None = Query(None, pattern=BENCHMARK_NAME_PATTERN),
    limit: int = Query(50, ge=1, le=500),
    after_id: int = Query(0, ge=0, le=MAX_INT),
) -> list[dict[str, Any]]:
    """Tasks with their status; results and outcomes once final."""
    return task_service.list_tasks(
        ctx, status=status, model_id=model_id, benchmark=benchmark, limit=limit, after_id=after_id
    )


@router.get("/tasks/{task_id}")
def get_task(task_id: RowId, ctx: Context) -> dict[str, Any]:
    return task_service.get_task(ctx, task_id)


@router.get("/benchmarks", response_model=list[BenchmarkOut])
def list_benchmarks(ctx: Context) -> list[BenchmarkOut]:
    return [BenchmarkOut.model_validate(b) for b in benchmarks.list_benchmarks(ctx)]


def _epoch_out(epoch: epochs.PublicEpoch) -> EpochOut:
    return EpochOut(
        id=epoch.id,
        starts_at=epoch.starts_at,
        ends_at=epoch.ends_at,
        seed_commitment=epoch.seed_commitment,
        seed=epoch.seed,
    )


@router.get("/epochs/current", response_model=EpochOut)
def current_epoch(ctx: Context) -> EpochOut:
    return _epoch_out(epochs.current_epoch(ctx))


@router.get("/epochs/{epoch_id}", response_model=EpochOut)
def get_epoch(epoch_id: RowId, ctx: Context) -> EpochOut:
    return _epoch_out(epochs.get_epoch(ctx, epoch_id))
