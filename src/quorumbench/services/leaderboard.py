"""The leaderboard: per (model, benchmark) rows and the aggregate over pillars.

Reads page in SQL, through an index for every sort key. Every row carries its rank on
the whole board (``core/ranking.py``), whatever the sort, filters and page: a read
also takes the board's scores and interval ends (three floats per ranked model) and
ranks the page's rows among them by bisection. The aggregate is not
computed on read: ``leaderboard_aggregates`` holds one row per model, recomputed
from that model's few per-benchmark rows in the transaction that finalizes one of
its tasks (:func:`refresh_aggregate`), and rebuilt in full at startup when the
active benchmarks, their weights or pillars, or the pillar weights differ from those
the rows were computed with (:func:`sync_aggregates`). The aggregate's maths, chance
correction included, is ``core/pillars.py``; a benchmark row's chance-corrected score
is computed on read from its stored chance sum.

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

from quorumbench.core.leaderboard import Accumulator, Interval, interval
from quorumbench.core.pillars import (
    AggregateRule,
    MeasuredBenchmark,
    PillarAggregate,
    corrected,
    mean_chance,
    pillar_aggregate,
    rule_basis,
)
from quorumbench.core.ranking import Standings, standings
from quorumbench.core.taxonomy import normalised_weights
from quorumbench.db.engine import Executor
from quorumbench.db.models import Benchmark, LeaderboardAggregate, LeaderboardEntry, Model
from quorumbench.errors import ConfigError, NotFoundError
from quorumbench.services.context import ServerContext

SortKey = Literal["score", "ci_low", "n_samples", "updated_at", "model"]
AGGREGATE = "aggregate"
SORT_KEYS: tuple[SortKey, ...] = ("score", "ci_low", "n_samples", "updated_at", "model")


@dataclass(frozen=True)
class Row:
    rank: int | None
    """Position by score on the whole board; equal scores share it (core/ranking.py).
    None for an aggregate row that is not complete (listed on request only)."""
    rank_best: int | None
    rank_worst: int | None
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
    pillar: str | None = None
    """A benchmark row's pillar."""
    chance: float | None = None
    """A benchmark row's mean chance level over its items (None: not known yet)."""
    normalised: Interval | None = None
    """A benchmark row's chance-corrected score and interval (core/pillars.py)."""
    pillars: dict[str, Interval] | None = None
    """An aggregate row's pillar scores (the pillars that have one)."""
    missing_pillars: tuple[str, ...] = ()
    """An aggregate row's pillars of positive weight without a score (then unranked)."""


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
    unranked: bool = False,
) -> Page:
    """One benchmark's ranking, or the aggregate over pillars when ``benchmark`` is None
    (with ``unranked``, also the models not complete, with rank None)."""
    if sort not in SORT_KEYS:
        raise ConfigError(f"cannot sort by {sort!r}; use one of {', '.join(SORT_KEYS)}")
    with ctx.db.read() as session:
        if ctx.db.dialect == "postgresql":  # one snapshot for the count, ranks and page
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        pillar: str | None = None
        if benchmark in (None, AGGREGATE):
            board: Board = LeaderboardAggregate
            name = AGGREGATE
            ranked_only = [LeaderboardAggregate.complete == true()]
            where: list[ColumnElement[bool]] = [] if unranked else list(ranked_only)
        else:
            bench = session.execute(
                select(Benchmark.id, Benchmark.name, Benchmark.pillar)
                .where(Benchmark.name == benchmark, Benchmark.active)
                .order_by(Benchmark.version.desc())
                .limit(1)
            ).first()
            if bench is None:
                raise NotFoundError(f"no active benchmark named {benchmark!r}")
            board, name, pillar = LeaderboardEntry, bench.name, bench.pillar
            where = [LeaderboardEntry.benchmark_id == bench.id]
            ranked_only = list(where)
        where.append(on_board(board))  # retired models are off every board
        ranked_on = [*ranked_only, on_board(board)]  # ranks ignore the filters below
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
        return Page([_row(r, name, pillar, places) for r in rows], total)


def _row(r: Any, name: str, pillar: str | None, places: Standings) -> Row:
    """A page row: a benchmark's with its chance correction, the aggregate's with its
    pillars (ranked only when complete)."""
    rank: tuple[int | None, int | None, int | None] = (None, None, None)
    if name != AGGREGATE or r.complete:
        rank = places.rank(r.score, r.ci_low, r.ci_high)
    if name == AGGREGATE:
        extra: dict[str, Any] = {
            "pillars": stored_pillars(r.pillars),
            "missing_pillars": tuple(r.missing_pillars or ()),
        }
    else:
        chance = mean_chance(r.chance_sum, r.n_samples)
        raw = Interval(r.score, r.stderr, r.ci_low, r.ci_high)
        extra = {
            "pillar": pillar,
            "chance": chance,
            "normalised": None if chance is None else corrected(raw, chance),
        }
    return Row(
        *rank,
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
        **extra,
    )


def stored_pillars(stored: dict[str, Any] | None) -> dict[str, Interval]:
    """An aggregate row's ``pillars`` column as intervals."""
    return {
        p: Interval(v["score"], v["stderr"], v["ci_low"], v["ci_high"])
        for p, v in (stored or {}).items()
    }


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
        *(
            [
                LeaderboardAggregate.complete,
                LeaderboardAggregate.pillars,
                LeaderboardAggregate.missing_pillars,
            ]
            if board is LeaderboardAggregate
            else [LeaderboardEntry.chance_sum]
        ),
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
    locked it). Makes sure the aggregate row exists, locks it, then reads the rule
    (benchmarks, weights, pillars) and the model's rows on the active benchmarks (a
    handful); a model with none has no aggregate row.
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
            "pillars": {},
            "missing_pillars": [],
        },
    )
    rule = active_rule(ctx, session)
    ids = list(rule.benchmarks)
    rows = session.execute(_MODEL_ENTRIES, {"ids": ids, "model_id_": model_id}).all()
    if not rows:
        session.execute(_DROP_AGGREGATE, {"model_id_": model_id})
        return
    aggregate = pillar_aggregate([_part(r) for r in rows], rule)
    session.execute(
        _SET_AGGREGATE, {"model_id_": model_id, **aggregate_values(aggregate, rule_basis(rule))}
    )


def sync_aggregates(ctx: ServerContext, session: Session) -> bool:
    """Rebuild every aggregate row if any is out of date; whether it did.

    Out of date: a row computed with other benchmarks, weights, pillars or pillar
    weights than the active ones now, or a model with rows on active benchmarks but
    no aggregate (rows loaded behind the server's back, a migration run offline).
    """
    rule = active_rule(ctx, session)
    basis = rule_basis(rule)
    stale = session.scalar(select(exists().where(LeaderboardAggregate.basis != basis)))
    missing = session.scalar(
        select(
            exists().where(
                LeaderboardEntry.benchmark_id.in_(list(rule.benchmarks)),
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
        # Writers (finalizations) wait until this commits, then read the new rule;
        # readers carry on with the old rows.
        session.execute(text("LOCK TABLE leaderboard_aggregates IN EXCLUSIVE MODE"))
    rule = active_rule(ctx, session)
    basis = rule_basis(rule)
    by_model: dict[int, list[MeasuredBenchmark]] = {}
    for row in session.execute(_entries(list(rule.benchmarks))):
        by_model.setdefault(row.model_id, []).append(_part(row))
    rows = [
        {"model_id": model_id, **aggregate_values(pillar_aggregate(parts, rule), basis)}
        for model_id, parts in sorted(by_model.items())
    ]
    session.execute(delete(LeaderboardAggregate))
    if rows:
        session.execute(insert(LeaderboardAggregate), rows)
    return len(rows)


_ACTIVE = select(Benchmark.id, Benchmark.weight, Benchmark.pillar).where(Benchmark.active)


def active_rule(ctx: ServerContext, session: Executor) -> AggregateRule:
    """The aggregate's rule now: the active benchmarks' weights and pillars, and the
    settings' pillar weights, normalised."""
    return AggregateRule(
        {bench_id: (weight, pillar) for bench_id, weight, pillar in session.execute(_ACTIVE)},
        normalised_weights(ctx.settings.pillar_weights),
    )


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
    LeaderboardEntry.chance_sum,
)


def _entries(ids: list[int]) -> Select[*tuple[Any, ...]]:
    return _ENTRY_COLUMNS.where(LeaderboardEntry.benchmark_id.in_(ids))


_THIS_MODEL = bindparam("model_id_", type_=Integer)
_MODEL_ENTRIES = _ENTRY_COLUMNS.where(
    LeaderboardEntry.model_id == _THIS_MODEL,
    LeaderboardEntry.benchmark_id.in_(bindparam("ids", expanding=True)),
)
_DROP_AGGREGATE = delete(LeaderboardAggregate).where(LeaderboardAggregate.model_id == _THIS_MODEL)
_SET_AGGREGATE = update(LeaderboardAggregate).where(LeaderboardAggregate.model_id == _THIS_MODEL)


def _part(row: Any) -> MeasuredBenchmark:
    return MeasuredBenchmark(
        row.benchmark_id,
        Interval(row.score, row.stderr, row.ci_low, row.ci_high),
        mean_chance(row.chance_sum, row.n_samples),
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


def interval_dict(value: Interval) -> dict[str, float]:
    return {
        "score": value.score,
        "stderr": value.stderr,
        "ci_low": value.ci_low,
        "ci_high": value.ci_high,
    }


def aggregate_values(aggregate: PillarAggregate, basis: str) -> dict[str, Any]:
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
        "pillars": {p: interval_dict(v) for p, v in aggregate.pillars.items()},
        "missing_pillars": list(aggregate.missing),
    }
