"""The leaderboard: per (model, benchmark) rows and the weighted aggregate over benchmarks.

Reads page in SQL, through an index for every sort key. Every row carries its rank on
the whole board (``core/ranking.py``), whatever the sort, filters and page: a read
also takes the board's scores and interval ends (three floats per ranked model) and
ranks the page's rows among them by bisection. The aggregate is not
computed on read: ``leaderboard_aggregates`` holds one row per model, recomputed
from that model's few per-benchmark rows in the transaction that finalizes one of
its tasks (:func:`refresh_aggregate`), and rebuilt in full at startup when the
active benchmarks or their weights differ from those the rows were computed with
(:func:`sync_aggregates`).

A retired model (services/models.py) is on no board: every read leaves it out, and it
takes no rank; its rows stay, as its history does.

Locking on PostgreSQL: a finalization locks its per-benchmark row, then the model's
aggregate row (always in that order, so finalizations of one model on two benchmarks
serialize on the aggregate row and cannot deadlock), and only then reads the weights
and the model's rows, so it sees every finalization committed before it. A rebuild
locks the whole aggregate table against writers first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    true,
    update,
)
from sqlalchemy.orm import Session

from quorumbench.core.leaderboard import (
    Accumulator,
    BenchmarkPart,
    Interval,
    ModelAggregate,
    aggregate_basis,
    interval,
    model_aggregate,
)
from quorumbench.core.ranking import Standings, standings
from quorumbench.db.engine import Executor
from quorumbench.db.models import Benchmark, LeaderboardAggregate, LeaderboardEntry, Model
from quorumbench.errors import ConfigError, NotFoundError
from quorumbench.services.context import ServerContext

SortKey = Literal["score", "ci_low", "n_samples", "updated_at", "model"]
AGGREGATE = "aggregate"
SORT_KEYS: tuple[SortKey, ...] = ("score", "ci_low", "n_samples", "updated_at", "model")


@dataclass(frozen=True)
class Row:
    rank: int
    """Position by score on the whole board; equal scores share it (core/ranking.py)."""
    rank_best: int
    rank_worst: int
    """The best and worst rank the 95% intervals allow."""
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


Board = type[LeaderboardEntry] | type[LeaderboardAggregate]


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
    if sort not in SORT_KEYS:
        raise ConfigError(f"cannot sort by {sort!r}; use one of {', '.join(SORT_KEYS)}")
    with ctx.db.read() as session:
        if ctx.db.dialect == "postgresql":  # one snapshot for the count, ranks and page
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        if benchmark in (None, AGGREGATE):
            board: Board = LeaderboardAggregate
            name = AGGREGATE
            where: list[ColumnElement[bool]] = [LeaderboardAggregate.complete == true()]
        else:
            bench = session.execute(
                select(Benchmark.id, Benchmark.name)
                .where(Benchmark.name == benchmark, Benchmark.active)
                .order_by(Benchmark.version.desc())
                .limit(1)
            ).first()
            if bench is None:
                raise NotFoundError(f"no active benchmark named {benchmark!r}")
            board, name = LeaderboardEntry, bench.name
            where = [LeaderboardEntry.benchmark_id == bench.id]
        where.append(on_board(board))  # retired models are off every board
        ranked_on = list(where)  # the board: ranks ignore the filters below
        if min_samples > 0:  # (0 would add an always-true range term)
            # ``+ 0`` keeps the planner on the sort key's index (SQLite's unary-plus
            # idiom): most rows pass, and scanning the range then sorting is slower.
            samples = board.n_samples if sort == "n_samples" else board.n_samples + 0
            where.append(samples >= min_samples)
        named = [Model.name.contains(model_query)] if model_query else []
        counted = select(func.count()).select_from(board)
        if named:  # the count needs the models only to filter by name
            counted = counted.join(Model, Model.id == board.model_id)
        total = session.scalar(counted.where(*where, *named)) or 0
        rows = session.execute(_ranked(board, where, named, sort, descending, limit, offset)).all()
        places = board_standings(session, board, ranked_on) if rows else standings(())
        return Page(
            [
                Row(
                    *places.rank(r.score, r.ci_low, r.ci_high),
                    r.model_id,
                    r.name,
                    name,
                    r.score,
                    r.stderr,
                    r.ci_low,
                    r.ci_high,
                    r.n_samples,
                    r.n_tasks,
                    r.updated_at,
                )
                for r in rows
            ],
            total,
        )


def on_board(board: Board) -> ColumnElement[bool]:
    """The rows of models that are not retired: the few retired ones are read through
    ``ix_models_retired_at`` once per query, not looked up per row."""
    return board.model_id.not_in(select(Model.id).where(Model.retired_at.is_not(None)))


def board_standings(session: Session, board: Board, where: list[ColumnElement[bool]]) -> Standings:
    """The standings (``core.ranking``) of the rows of ``board`` that pass ``where``
    (a plain Core read: thousands of rows)."""
    query = select(board.score, board.ci_low, board.ci_high).where(*where)
    return standings(session.connection().execute(query).all())


def _ranked(
    board: Board,
    where: list[ColumnElement[bool]],
    named: list[ColumnElement[bool]],
    sort: SortKey,
    descending: bool,
    limit: int,
    offset: int,
) -> Select[*tuple[Any, ...]]:
    """One page of ``board`` rows in order (ties by model id), with the models' names.

    The page is cut along one index before anything else is joined: the sort key's
    index on ``board`` (joined to the models only for a name filter), or, sorting by
    name, the models' name index with a lookup of each model's ``board`` row.
    """

    def order(key: Any, model_id: Any) -> tuple[Any, Any]:
        return (key.desc() if descending else key.asc(), model_id)

    columns = [
        board.model_id,
        board.score,
        board.stderr,
        board.ci_low,
        board.ci_high,
        board.n_samples,
        board.n_tasks,
        board.updated_at,
    ]
    if sort == "model":
        models = (
            select(Model.id, Model.name)
            .where(exists().where(board.model_id == Model.id, *where), *named)
            .order_by(*order(Model.name, Model.id))
            .limit(limit)
            .offset(offset)
            .subquery()
        )
        return (
            select(*columns, models.c.name)
            .join(models, models.c.id == board.model_id)
            .where(*where)
            .order_by(*order(models.c.name, models.c.id))
        )
    key = getattr(board, sort)
    if named:
        return (
            select(*columns, Model.name)
            .join(Model, Model.id == board.model_id)
            .where(*where, *named)
            .order_by(*order(key, board.model_id))
            .limit(limit)
            .offset(offset)
        )
    page = (
        select(*columns)
        .where(*where)
        .order_by(*order(key, board.model_id))
        .limit(limit)
        .offset(offset)
        .subquery()
    )
    return (
        select(page, Model.name)
        .join(Model, Model.id == page.c.model_id)
        .order_by(*order(page.c[sort], page.c.model_id))
    )


# --- keeping the aggregate current ---------------------------------------------------


def refresh_aggregate(ctx: ServerContext, session: Executor, model_id: int) -> None:
    """Recompute one model's aggregate row from its per-benchmark rows.

    Called in the finalizing transaction right after a per-benchmark row changed (and
    locked it). Makes sure the aggregate row exists, locks it, then reads the weights
    and the model's rows on the active benchmarks (a handful); a model with none has
    no aggregate row.
    """
    ctx.db.locked_row(
        session,
        LeaderboardAggregate,
        {"model_id": model_id},
        {
            "n_benchmarks": 0,
            "complete": False,
            "n_tasks": 0,
            "n_samples": 0,
            "score": 0.0,
            "stderr": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "updated_at": ctx.now(),
            "basis": "",
        },
    )
    weights = _active_weights(session)
    rows = session.execute(_MODEL_ENTRIES, {"ids": list(weights), "model_id_": model_id}).all()
    if not rows:
        session.execute(_DROP_AGGREGATE, {"model_id_": model_id})
        return
    aggregate = model_aggregate([_part(weights, r) for r in rows], len(weights))
    session.execute(
        _SET_AGGREGATE,
        {"model_id_": model_id, **aggregate_values(aggregate, aggregate_basis(weights))},
    )


def sync_aggregates(ctx: ServerContext, session: Session) -> bool:
    """Rebuild every aggregate row if any is out of date; whether it did.

    Out of date: a row computed with other benchmarks or weights than the active ones
    now, or a model with rows on active benchmarks but no aggregate (rows loaded
    behind the server's back, a migration run offline).
    """
    weights = _active_weights(session)
    basis = aggregate_basis(weights)
    stale = session.scalar(select(exists().where(LeaderboardAggregate.basis != basis)))
    missing = session.scalar(
        select(
            exists().where(
                LeaderboardEntry.benchmark_id.in_(weights),
                ~exists().where(LeaderboardAggregate.model_id == LeaderboardEntry.model_id),
            )
        )
    )
    if not (stale or missing):
        return False
    rebuild_aggregates(ctx, session)
    return True


def rebuild_aggregates(ctx: ServerContext, session: Session) -> int:
    """Recompute every aggregate row from the per-benchmark rows; how many there are."""
    if ctx.db.dialect == "postgresql":
        # Writers (finalizations) wait until this commits, then read the new weights;
        # readers carry on with the old rows.
        session.execute(text("LOCK TABLE leaderboard_aggregates IN EXCLUSIVE MODE"))
    weights = _active_weights(session)
    basis = aggregate_basis(weights)
    by_model: dict[int, list[BenchmarkPart]] = {}
    for row in session.execute(_entries(weights)):
        by_model.setdefault(row.model_id, []).append(_part(weights, row))
    rows = [
        {"model_id": model_id, **aggregate_values(model_aggregate(parts, len(weights)), basis)}
        for model_id, parts in sorted(by_model.items())
    ]
    session.execute(delete(LeaderboardAggregate))
    if rows:
        session.execute(insert(LeaderboardAggregate), rows)
    return len(rows)


_ACTIVE_WEIGHTS = select(Benchmark.id, Benchmark.weight).where(Benchmark.active)


def _active_weights(session: Executor) -> dict[int, float]:
    return {bench_id: weight for bench_id, weight in session.execute(_ACTIVE_WEIGHTS)}


_ENTRY_COLUMNS = select(
    LeaderboardEntry.model_id,
    LeaderboardEntry.benchmark_id,
    LeaderboardEntry.score,
    LeaderboardEntry.stderr,
    LeaderboardEntry.ci_low,
    LeaderboardEntry.ci_high,
    LeaderboardEntry.n_samples,
    LeaderboardEntry.n_tasks,
    LeaderboardEntry.updated_at,
)


def _entries(weights: dict[int, float]) -> Select[*tuple[Any, ...]]:
    return _ENTRY_COLUMNS.where(LeaderboardEntry.benchmark_id.in_(weights))


_THIS_MODEL = bindparam("model_id_", type_=Integer)
_MODEL_ENTRIES = _ENTRY_COLUMNS.where(
    LeaderboardEntry.model_id == _THIS_MODEL,
    LeaderboardEntry.benchmark_id.in_(bindparam("ids", expanding=True)),
)
_DROP_AGGREGATE = delete(LeaderboardAggregate).where(LeaderboardAggregate.model_id == _THIS_MODEL)
_SET_AGGREGATE = update(LeaderboardAggregate).where(LeaderboardAggregate.model_id == _THIS_MODEL)


def _part(weights: dict[int, float], row: Any) -> BenchmarkPart:
    return BenchmarkPart(
        weights[row.benchmark_id],
        Interval(row.score, row.stderr, row.ci_low, row.ci_high),
        row.n_samples,
        row.n_tasks,
        row.updated_at,
    )


def entry_values(acc: Accumulator, updated_at: datetime) -> dict[str, Any]:
    """A (model, benchmark) row's columns for its running sums (score and interval
    computed from them)."""
    stats = interval(acc)
    return {
        "n_tasks": acc.n_tasks,
        "n_samples": acc.n_samples,
        "weighted_sum": acc.weighted_sum,
        "sample_sum": acc.sample_sum,
        "sample_sumsq": acc.sample_sumsq,
        "score": stats.score,
        "stderr": stats.stderr,
        "ci_low": stats.ci_low,
        "ci_high": stats.ci_high,
        "updated_at": updated_at,
    }


def aggregate_values(aggregate: ModelAggregate, basis: str) -> dict[str, Any]:
    """A model's aggregate row's columns."""
    return {
        "n_benchmarks": aggregate.n_benchmarks,
        "complete": aggregate.complete,
        "n_tasks": aggregate.n_tasks,
        "n_samples": aggregate.n_samples,
        "score": aggregate.interval.score,
        "stderr": aggregate.interval.stderr,
        "ci_low": aggregate.interval.ci_low,
        "ci_high": aggregate.interval.ci_high,
        "updated_at": aggregate.updated_at,
        "basis": basis,
    }
