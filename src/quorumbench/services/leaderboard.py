"""Reading the leaderboard: per (model, benchmark) rows and the weighted aggregate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from sqlalchemy import func, select

from quorumbench.core.leaderboard import Interval, weighted_aggregate
from quorumbench.db.models import Benchmark, LeaderboardEntry, Model
from quorumbench.errors import ConfigError
from quorumbench.services.context import ServerContext

SortKey = Literal["score", "ci_low", "n_samples", "updated_at", "model"]
AGGREGATE = "aggregate"


@dataclass(frozen=True)
class Row:
    rank: int
    model_id: int
    model: str
    benchmark: str
    score: float
    stderr: float
    ci_low: float
    ci_high: float
    n_samples: int
    n_tasks: int
    updated_at: datetime


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    total: int


_COLUMNS = {
    "score": LeaderboardEntry.score,
    "ci_low": LeaderboardEntry.ci_low,
    "n_samples": LeaderboardEntry.n_samples,
    "updated_at": LeaderboardEntry.updated_at,
    "model": Model.name,
}


def leaderboard(
    ctx: ServerContext,
    *,
    benchmark: str | None = None,
    sort: SortKey = "score",
    descending: bool = True,
    min_samples: int = 0,
    model_query: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """One benchmark's ranking, or the aggregate over benchmarks when ``benchmark`` is None."""
    if sort not in _COLUMNS:
        raise ConfigError(f"cannot sort by {sort!r}; use one of {', '.join(_COLUMNS)}")
    if benchmark in (None, AGGREGATE):
        return _aggregate(ctx, sort, descending, min_samples, model_query, limit, offset)
    with ctx.db.read() as session:
        bench = session.scalars(
            select(Benchmark)
            .where(Benchmark.name == benchmark, Benchmark.active)
            .order_by(Benchmark.version.desc())
        ).first()
        if bench is None:
            raise ConfigError(f"no active benchmark named {benchmark!r}")
        query = (
            select(LeaderboardEntry, Model.name, Model.ref)
            .join(Model, Model.id == LeaderboardEntry.model_id)
            .where(LeaderboardEntry.benchmark_id == bench.id)
            .where(LeaderboardEntry.n_samples >= min_samples)
        )
        if model_query:
            query = query.where(Model.name.contains(model_query))
        total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
        column = _COLUMNS[sort]
        query = query.order_by(
            column.desc() if descending else column.asc(), LeaderboardEntry.model_id
        )
        rows = session.execute(query.limit(limit).offset(offset)).all()
        return Page(
            [
                Row(
                    offset + i + 1,
                    e.model_id,
                    name,
                    bench.name,
                    e.score,
                    e.stderr,
                    e.ci_low,
                    e.ci_high,
                    e.n_samples,
                    e.n_tasks,
                    e.updated_at,
                )
                for i, (e, name, _ref) in enumerate(rows)
            ],
            total,
        )


def _aggregate(
    ctx: ServerContext,
    sort: SortKey,
    descending: bool,
    min_samples: int,
    model_query: str | None,
    limit: int,
    offset: int,
) -> Page:
    with ctx.db.read() as session:
        weights = {
            b.id: b.weight for b in session.scalars(select(Benchmark).where(Benchmark.active))
        }
        query = (
            select(LeaderboardEntry, Model.name)
            .join(Model, Model.id == LeaderboardEntry.model_id)
            .where(LeaderboardEntry.benchmark_id.in_(weights))
        )
        if model_query:
            query = query.where(Model.name.contains(model_query))
        by_model: dict[int, list[tuple[LeaderboardEntry, str]]] = {}
        for entry, name in session.execute(query):
            by_model.setdefault(entry.model_id, []).append((entry, name))
    rows = []
    for model_id, parts in by_model.items():
        if len(parts) < len(weights):
            continue  # only models measured on every active benchmark are ranked overall
        agg = weighted_aggregate(
            [
                (weights[e.benchmark_id], Interval(e.score, e.stderr, e.ci_low, e.ci_high))
                for e, _ in parts
            ]
        )
        n_samples = sum(e.n_samples for e, _ in parts)
        if n_samples < min_samples:
            continue
        rows.append(
            Row(
                0,
                model_id,
                parts[0][1],
                AGGREGATE,
                agg.score,
                agg.stderr,
                agg.ci_low,
                agg.ci_high,
                n_samples,
                sum(e.n_tasks for e, _ in parts),
                max(e.updated_at for e, _ in parts),
            )
        )
    key = {
        "score": lambda r: r.score,
        "ci_low": lambda r: r.ci_low,
        "n_samples": lambda r: r.n_samples,
        "updated_at": lambda r: r.updated_at.timestamp(),
        "model": lambda r: r.model,
    }[sort]
    rows.sort(key=lambda r: r.model_id)
    rows.sort(key=key, reverse=descending)
    page = rows[offset : offset + limit]
    return Page([replace(r, rank=offset + i + 1) for i, r in enumerate(page)], len(rows))
