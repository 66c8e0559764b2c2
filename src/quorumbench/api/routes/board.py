"""Leaderboard, tasks, epochs and benchmarks (public reads)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from quorumbench.api.deps import Context
from quorumbench.api.params import MAX_INT, PLAIN_TEXT, RowId
from quorumbench.api.schemas import BenchmarkOut, EpochOut, LeaderboardOut, LeaderboardRowOut
from quorumbench.protocol import BENCHMARK_NAME_PATTERN, TaskStatus
from quorumbench.services import benchmarks, epochs
from quorumbench.services import tasks as task_service
from quorumbench.services.leaderboard import SortKey, leaderboard

router = APIRouter(prefix="/v0", tags=["leaderboard"])
CSV_COLUMNS = list(LeaderboardRowOut.model_fields)


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
) -> Any:
    """The ranking with 95% intervals and each model's rank on the whole board (``rank``,
    ``rank_best``, ``rank_worst``: sorting, ``q``, ``min_samples`` and paging never
    change them); ``format=csv`` for a spreadsheet."""
    page = leaderboard(
        ctx,
        benchmark=benchmark,
        sort=sort,
        descending=order == "desc",
        min_samples=min_samples,
        model_query=q,
        limit=limit,
        offset=offset,
    )
    rows = [LeaderboardRowOut(**r.__dict__) for r in page.rows]
    if format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.model_dump(mode="json"))
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
