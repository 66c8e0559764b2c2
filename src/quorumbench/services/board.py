"""The leaderboard as the pages and the static export show it: filtered, sorted, paged.

The leaderboard page filters by model type, size, licence and benchmark, which the
indexed read of the JSON API (:func:`~quorumbench.services.leaderboard.leaderboard`)
does not offer: :func:`board` reads every model that has a score (one Core query per
table), ranks them, and keeps that ranking for ``web_cache_s`` seconds (per process,
per benchmark); each request then filters, sorts and pages it in Python. Ranks are
those of ``core/ranking.py``, over every ranked model of the board before filtering,
so a model keeps its rank in any filtered or sorted view, and it is the rank the API,
the export and the CLI show. ``benchmarks/web_pages.py`` measures both paths.

A model's size, wherever it is shown, sorted or filtered by, is its effective size
(:func:`~quorumbench.services.model_metadata.model_size`): for a LoRA adapter its
base's parameters plus its own, with the adapter's own beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import func, select

from quorumbench.core.leaderboard import Interval
from quorumbench.core.ranking import standings
from quorumbench.core.taxonomy import normalised_weights
from quorumbench.db.models import (
    TASK_EDGE,
    Benchmark,
    LeaderboardAggregate,
    LeaderboardEntry,
    Model,
    Task,
)
from quorumbench.errors import ConfigError
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext, TtlMemo
from quorumbench.services.leaderboard import AGGREGATE, stored_pillars
from quorumbench.services.model_metadata import ModelSize, model_size

T = TypeVar("T")
ModelType = Literal["base", "lora", "gguf", "endpoint"]
MODEL_TYPES: tuple[ModelType, ...] = ("base", "lora", "gguf", "endpoint")


@dataclass(frozen=True)
class Score:
    score: float
    ci_low: float
    ci_high: float
    n_samples: int
    n_tasks: int
    updated_at: datetime


@dataclass(frozen=True)
class BoardRow:
    rank: int | None
    """Position by score on the chosen benchmark (or the complete aggregate); equal
    scores share it (``core/ranking.py``)."""
    model_id: int
    model: str
    ref: str
    type: ModelType
    params: int | None
    license: str | None
    score: Score | None
    """The score the row is ranked by: the chosen benchmark's, or the aggregate."""
    scores: dict[str, Score]
    disputed: int
    """DISPUTED tasks of this model."""
    rank_range: tuple[int, int] | None = None
    """The best and worst rank the 95% intervals allow (``core/ranking.py``)."""
    size: ModelSize = ModelSize(None)
    """The size shown, sorted and filtered by: base + adapter for a LoRA adapter
    (``params`` is the adapter's own then)."""
    pillars: dict[str, Interval] = field(default_factory=dict)
    """Its pillar scores (chance-corrected, core/pillars.py), for the pillars it has."""
    missing_pillars: tuple[str, ...] = ()
    """Pillars of positive weight it has no score on: why it has no aggregate rank."""

    @property
    def n_samples(self) -> int:
        return sum(s.n_samples for s in self.scores.values())

    @property
    def updated_at(self) -> datetime | None:
        return max((s.updated_at for s in self.scores.values()), default=None)


@dataclass(frozen=True)
class BoardQuery:
    benchmark: str | None = None
    sort: str = "rank"
    descending: bool = False
    q: str | None = None
    type: str | None = None
    min_params: int | None = None
    max_params: int | None = None
    license: str | None = None
    page: int = 1
    per_page: int = 50


@dataclass(frozen=True)
class BoardPage:
    rows: list[BoardRow]
    total: int
    """Rows that pass the filters (over all pages)."""
    benchmarks: list[str]
    licenses: list[str]
    query: BoardQuery
    pages: int
    pillars: list[tuple[str, float]] = field(default_factory=list)
    """Every pillar with its normalised weight in the aggregate, in taxonomy order."""


def model_type(ref: str, details: dict[str, Any]) -> ModelType:
    """The kind of model a canonical ref names (registration marks adapters' details)."""
    if ref.startswith("gguf:"):
        return "gguf"
    if ref.startswith("openai:"):
        return "endpoint"
    return "lora" if details.get("kind") == "adapter" else "base"


def active_benchmarks(ctx: ServerContext) -> list[str]:
    with ctx.db.read() as session:
        names = session.scalars(
            select(Benchmark.name).where(Benchmark.active).distinct().order_by(Benchmark.name)
        )
        return list(names)


def all_model_ids(ctx: ServerContext) -> list[int]:
    """Models with a score (for the static export)."""
    with ctx.db.read() as session:
        return list(
            session.scalars(
                select(LeaderboardEntry.model_id).distinct().order_by(LeaderboardEntry.model_id)
            )
        )


def to_score(row: Any) -> Score:
    """The :class:`Score` of a leaderboard row (per benchmark or aggregate)."""
    return Score(row.score, row.ci_low, row.ci_high, row.n_samples, row.n_tasks, row.updated_at)


@dataclass(frozen=True)
class _PillarsOf:
    pillars: dict[str, Interval]
    missing: tuple[str, ...]


def _all_rows(ctx: ServerContext) -> tuple[list[str], list[BoardRow], dict[int, Score]]:
    """Every model with a score on an active benchmark (unranked; retired ones left out),
    and the aggregates.

    Plain Core reads on the session's connection: tens of thousands of rows, for which
    the ORM's row handling would cost more than the database.
    """
    with ctx.db.read() as session:
        conn = session.connection()
        benches = {
            b.id: b.name
            for b in conn.execute(select(Benchmark.id, Benchmark.name).where(Benchmark.active))
        }
        score_columns = (
            LeaderboardEntry.score,
            LeaderboardEntry.ci_low,
            LeaderboardEntry.ci_high,
            LeaderboardEntry.n_samples,
            LeaderboardEntry.n_tasks,
            LeaderboardEntry.updated_at,
        )
        scores: dict[int, dict[str, Score]] = {}
        for row in conn.execute(
            select(LeaderboardEntry.model_id, LeaderboardEntry.benchmark_id, *score_columns).where(
                LeaderboardEntry.benchmark_id.in_(benches)
            )
        ):
            scores.setdefault(row.model_id, {})[benches[row.benchmark_id]] = to_score(row)
        agg = LeaderboardAggregate
        aggregates: dict[int, Score] = {}
        pillars: dict[int, _PillarsOf] = {}
        for row in conn.execute(
            select(
                agg.model_id,
                agg.score,
                agg.ci_low,
                agg.ci_high,
                agg.n_samples,
                agg.n_tasks,
                agg.updated_at,
                agg.complete,
                agg.pillars,
                agg.missing_pillars,
            )
        ):
            if row.complete:
                aggregates[row.model_id] = to_score(row)
            pillars[row.model_id] = _PillarsOf(
                stored_pillars(row.pillars), tuple(row.missing_pillars or ())
            )
        disputed: dict[int, int] = {
            model_id: n
            for model_id, n in conn.execute(
                select(Task.model_id, func.count())
                .where(Task.status == TaskStatus.DISPUTED, Task.purpose != TASK_EDGE)
                .group_by(Task.model_id)
            )
        }
        models = conn.execute(
            select(Model.id, Model.name, Model.ref, Model.params, Model.license, Model.details)
            .where(Model.retired_at.is_(None))  # retired: off the board
            .order_by(Model.id)
        )
        rows = [
            BoardRow(
                None,
                m.id,
                m.name,
                m.ref,
                model_type(m.ref, m.details or {}),
                m.params,
                m.license,
                None,
                scores[m.id],
                disputed.get(m.id, 0),
                size=model_size(m.params, m.details),
                pillars=pillars[m.id].pillars if m.id in pillars else {},
                missing_pillars=pillars[m.id].missing if m.id in pillars else (),
            )
            for m in models
            if m.id in scores
        ]
    return sorted(set(benches.values())), rows, aggregates


@dataclass(frozen=True)
class _Ranked:
    """Every listed row of one ranking, ranked rows first in rank order."""

    benchmarks: list[str]
    rows: list[BoardRow]
    licenses: list[str]


def _rank(ctx: ServerContext, bench: str | None) -> _Ranked:
    """Read and rank every row by ``bench``'s score (None: the complete aggregate)."""
    benchmarks, rows, aggregates = _all_rows(ctx)
    if bench is not None and bench not in benchmarks:
        raise ConfigError(f"no active benchmark named {bench!r}")

    def basis(row: BoardRow) -> Score | None:
        return row.scores.get(bench) if bench else aggregates.get(row.model_id)

    scored = [(basis(r), r) for r in rows]
    on_board = [(s, r) for s, r in scored if s is not None]
    places = standings((s.score, s.ci_low, s.ci_high) for s, _ in on_board)
    ranked = []
    for s, r in on_board:
        place = places.rank(s.score, s.ci_low, s.ci_high)
        ranked.append(replace(r, rank=place.rank, score=s, rank_range=(place.best, place.worst)))
    ranked.sort(key=lambda r: (r.rank, r.model_id))
    if bench is None:  # the incomplete ones are listed too, unranked, by model id
        ranked += [replace(r, score=None) for s, r in scored if s is None]
    licenses = sorted({r.license for r in ranked if r.license})
    return _Ranked(benchmarks, ranked, licenses)


def kept(ctx: ServerContext, key: Hashable, make: Callable[[], T]) -> T:
    """``make()``, reused for ``web_cache_s`` seconds (per process, per key)."""
    ttl = ctx.settings.web_cache_s
    if ttl <= 0:
        return make()
    if ctx.boards is None:
        ctx.boards = TtlMemo(ttl, maxsize=64)
    found: T = ctx.boards.get_or_make(key, make)
    return found


def _ranked(ctx: ServerContext, bench: str | None) -> _Ranked:
    """:func:`_rank`, kept per benchmark (:func:`kept`)."""
    return kept(ctx, ("board", bench), lambda: _rank(ctx, bench))


_SORT_VALUES: dict[str, Callable[[BoardRow], Any]] = {
    "rank": lambda r: r.rank,
    "model": lambda r: r.model.lower(),
    "type": lambda r: r.type,
    "params": lambda r: r.size.effective_params,
    "score": lambda r: r.score.score if r.score else None,
    "n_samples": lambda r: r.n_samples,
    "updated_at": lambda r: r.updated_at,
    "disputed": lambda r: r.disputed,
}
BOARD_SORTS = tuple(_SORT_VALUES)


def _sorted(rows: list[BoardRow], sort: str, descending: bool) -> list[BoardRow]:
    """``rows`` by a column (ties by model id); rows without a value last either way."""
    value = _SORT_VALUES[sort]
    keyed = [(value(r), r) for r in rows]
    present = [p for p in keyed if p[0] is not None]
    present.sort(key=lambda p: (p[0], p[1].model_id), reverse=descending)
    return [r for _, r in present] + [r for v, r in keyed if v is None]


def board(ctx: ServerContext, query: BoardQuery) -> BoardPage:
    """One page of the leaderboard for ``query``; see the module docstring."""
    if query.sort not in BOARD_SORTS:
        raise ConfigError(f"cannot sort by {query.sort!r}; use one of {', '.join(BOARD_SORTS)}")
    if query.type and query.type not in MODEL_TYPES:
        raise ConfigError(f"unknown model type {query.type!r}; use one of {MODEL_TYPES}")
    bench = None if query.benchmark in (None, "", AGGREGATE) else query.benchmark
    ranked = _ranked(ctx, bench)
    kept_rows = [r for r in ranked.rows if _passes(r, query)]
    if query.sort != "rank" or query.descending:  # else: in rank order already
        kept_rows = _sorted(kept_rows, query.sort, query.descending)
    per_page = max(1, min(query.per_page, 1000))
    shown, page, pages = paged(kept_rows, query.page, per_page)
    return BoardPage(
        shown,
        len(kept_rows),
        ranked.benchmarks,
        ranked.licenses,
        BoardQuery(**{**query.__dict__, "page": page, "per_page": per_page}),
        pages,
        list(normalised_weights(ctx.settings.pillar_weights).items()),
    )


def paged(rows: list[T], page: int, per_page: int) -> tuple[list[T], int, int]:
    """Page ``page`` of ``rows`` (clamped to 1..pages), that page's number, and pages."""
    pages = max(1, -(-len(rows) // per_page))
    page = min(max(1, page), pages)
    return rows[(page - 1) * per_page : page * per_page], page, pages


def _passes(row: BoardRow, query: BoardQuery) -> bool:
    """Whether ``row`` passes the filters; the size range is on the effective size."""
    if query.q and query.q.lower() not in f"{row.model} {row.ref}".lower():
        return False
    if query.type and row.type != query.type:
        return False
    if query.license and row.license != query.license:
        return False
    size = row.size.effective_params
    if query.min_params is not None and (size is None or size < query.min_params):
        return False
    return not (query.max_params is not None and (size is None or size > query.max_params))
