"""Answers to plans from consensus-verified results (the cache of personalized boards).

A plan's answer is read from ``label_aggregates`` (kept by ``services/label_cache.py``
as tasks finalize), never from sample rows:

1. the active benchmarks the plan covers (:meth:`Plan.covers_benchmark` on the name
   and its pillar), and their label sets the plan matches (:meth:`Plan.matches` on
   the set's five labels); a benchmark all of whose sets match is read from its total
   set instead, one row per model;
2. one grouped query: per (model, benchmark), the sums over those sets, joined to the
   models that are not retired (and, for ``named``, carry one of the names or refs);
3. per model: the score is the mean of its slice's per-sample consensus scores, its
   interval :func:`~quorumbench.core.intervals.score_interval` of their sum and
   count (exact Clopper–Pearson; computed for all rows at once by
   ``services/interval_batch.py``), the mean chance level, the samples per benchmark and
   the newest finalize time; the ``filter`` selection keeps the models of its kinds
   and sizes; ranks are ``core/ranking.py``'s among the answer's rows.

Model selection: ``ranked`` is every model not retired (the public board's models)
with samples in the slice; ``filter`` those of ``kinds`` (a ref's scheme: ``hf``,
``gguf``, ``openai``; ``lora`` for an ``hf`` adapter, as the board types them) whose
effective size (``model_metadata.model_size``: base + adapter for a LoRA) lies
within the bounds (a model of unknown size is left out by any bound); ``named``
those whose name or ref is listed. A selected model without samples in the slice
has no row (``named`` lists them in :attr:`CacheAnswer.unmeasured`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    String,
    case,
    func,
    or_,
    select,
    type_coerce,
)
from sqlalchemy.orm import Session

from quorumbench.core.plans import Plan
from quorumbench.core.ranking import ranks
from quorumbench.core.taxonomy import LABEL_KEYS
from quorumbench.db.label_models import LabelAggregate, LabelSet
from quorumbench.db.models import Benchmark, Model
from quorumbench.services.context import ServerContext
from quorumbench.services.interval_batch import score_intervals
from quorumbench.services.label_cache import TOTAL
from quorumbench.services.model_metadata import model_size


@dataclass(frozen=True)
class Unmeasured:
    """A model the plan names that has no sample in the slice."""

    model_id: int
    name: str
    ref: str


class SliceRow(NamedTuple):
    """One model's score over the plan's slice of its verified per-sample results (a
    named tuple: ten thousand are made per broad answer, five times faster than a
    frozen dataclass)."""

    model_id: int
    name: str
    ref: str
    n_samples: int
    score: float
    ci_low: float
    ci_high: float
    chance: float | None
    """Mean chance level of the slice's samples (None: not known)."""
    benchmarks: dict[str, int]
    """Samples per benchmark name in the slice."""
    updated_at: datetime
    """When the newest task in the slice was finalized (freshness)."""
    rank: int
    best: int
    worst: int
    thin: bool
    """Fewer samples than the plan's budget."""


@dataclass(frozen=True)
class CacheAnswer:
    plan_id: str
    rows: list[SliceRow]
    """Ranked (core/ranking.py), best first."""
    benchmarks: list[str] = field(default_factory=list)
    """Benchmarks whose labelled samples the slice covers."""
    label_sets: int = 0
    """How many (benchmark, label combination) cells matched."""
    unmeasured: list[Unmeasured] = field(default_factory=list)
    """Models the plan names (``named``) that have no sample in the slice."""


def _label_sets(conn: Connection, plan: Plan) -> tuple[list[int], dict[int, str], int]:
    """The label set ids to read (a benchmark's total set where every one of its sets
    matches), the benchmarks they are of (id: name), and how many sets matched."""
    covered = {
        row.id: row.name
        for row in conn.execute(
            select(Benchmark.id, Benchmark.name, Benchmark.pillar).where(Benchmark.active)
        )
        if plan.covers_benchmark(row.name, row.pillar)
    }
    if not covered:
        return [], {}, 0
    total: dict[int, int] = {}
    cells: dict[int, int] = {}
    matched: dict[int, list[int]] = {}
    columns = [getattr(LabelSet, key) for key in LABEL_KEYS]
    for row in conn.execute(
        select(LabelSet.id, LabelSet.benchmark_id, *columns).where(
            LabelSet.benchmark_id.in_(covered)
        )
    ):
        labels = dict(zip(LABEL_KEYS, row[2:], strict=True))
        if labels["skill"] == TOTAL:
            total[row.benchmark_id] = row.id
            continue
        cells[row.benchmark_id] = cells.get(row.benchmark_id, 0) + 1
        if plan.matches(labels):
            matched.setdefault(row.benchmark_id, []).append(row.id)
    ids: list[int] = []
    for bench_id, found in matched.items():
        whole = len(found) == cells[bench_id] and bench_id in total
        ids += [total[bench_id]] if whole else found
    names = {b: covered[b] for b in matched}
    return sorted(ids), names, sum(len(found) for found in matched.values())


def _kind(ref: str, details: dict[str, Any] | None) -> str:
    """A model's kind as plans name them: its ref's scheme, ``lora`` for an adapter."""
    scheme = ref.partition(":")[0]
    if scheme == "hf" and (details or {}).get("kind") == "adapter":
        return "lora"
    return scheme


def _selected(plan: Plan, ref: str, params: int | None, details: dict[str, Any] | None) -> bool:
    """Whether a ``filter`` selection keeps the model (see the module docstring)."""
    wanted = plan.models
    if wanted.kinds and _kind(ref, details) not in wanted.kinds:
        return False
    size = model_size(params, details).effective_params
    low, high = wanted.min_params, wanted.max_params
    if low is not None and (size is None or size < low):
        return False
    return not (high is not None and (size is None or size > high))


def _freshness(stored: str) -> datetime:
    """A UTC time as SQLite stores it (``UTCDateTime``: naive, in UTC); parsed with its
    offset appended, six times faster than parsing then ``replace(tzinfo=UTC)``."""
    return datetime.fromisoformat(stored + "+00:00")


def _named(plan: Plan) -> ColumnElement[bool]:
    names = list(plan.models.names)
    return or_(Model.name.in_(names), Model.ref.in_(names))


def _grouped_read(
    plan: Plan, ids: list[int], benchmarks: list[int], *, sqlite_text: bool
) -> Select[Any]:
    """One row per selected model: its sums over the label sets ``ids``, the newest
    finalize time, its samples on each of ``benchmarks`` (columns ``n0``, ``n1`` …),
    its name and ref (and size and details for a ``filter`` selection)."""
    agg = LabelAggregate
    # SQLite's stored text, parsed in C by _freshness (the column type's own parsing
    # costs more than the rest of a row's handling); PostgreSQL's timestamps as read
    newest: ColumnElement[Any] = func.max(agg.updated_at)
    if sqlite_text:
        newest = type_coerce(newest, String)
    per_benchmark = [
        func.sum(case((agg.benchmark_id == bench_id, agg.n_samples), else_=0)).label(f"n{i}")
        for i, bench_id in enumerate(benchmarks)
    ]
    where = [agg.label_set_id.in_(ids)]
    if plan.models.select == "named":  # a few models: only theirs are summed
        where.append(agg.model_id.in_(select(Model.id).where(_named(plan))))
    elif plan.models.kinds:  # only refs of those schemes (hf covers lora); see _selected
        schemes = sorted({"hf" if kind == "lora" else kind for kind in plan.models.kinds})
        of_kind = or_(*(Model.ref.startswith(f"{scheme}:") for scheme in schemes))
        where.append(agg.model_id.in_(select(Model.id).where(of_kind)))
    models = (
        select(
            agg.model_id,
            func.sum(agg.n_samples).label("n"),
            func.sum(agg.sample_sum).label("total"),
            func.sum(agg.chance_sum).label("chance"),
            newest.label("updated_at"),
            *per_benchmark,
        )
        .where(*where)
        .group_by(agg.model_id)
        .subquery()
    )
    details = [Model.params, Model.details] if plan.models.select == "filter" else []
    query = (
        select(models, Model.name, Model.ref, *details)
        .join(Model, Model.id == models.c.model_id)
        .where(Model.retired_at.is_(None))
    )
    return query  # (for ``named``, the inner read keeps their ids already)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while an answer's ~50,000 short-lived objects are
    made (rows, tuples, SliceRows; none in a cycle, so reference counting frees them):
    the collections those allocations would set off walk the whole server's heap, a
    third of a broad answer's time (measured: median 292 → 196 ms at 10,000 models).
    Concurrent answers may overlap; the collector is back on once the first that
    turned it off is done, and never left off."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def answer(ctx: ServerContext, session: Session, plan: Plan) -> CacheAnswer:
    """The plan's board from the cache: no sample rows are scanned (module docstring)."""
    with _collector_paused():
        return _answer(ctx, session, plan)


def _answer(ctx: ServerContext, session: Session, plan: Plan) -> CacheAnswer:
    conn = session.connection()
    ids, bench_names, matched = _label_sets(conn, plan)
    benchmarks = sorted(bench_names)
    rows: Sequence[Any] = []
    sqlite_text = ctx.db.dialect == "sqlite"
    if ids:
        query = _grouped_read(plan, ids, benchmarks, sqlite_text=sqlite_text)
        rows = conn.execute(query).all()
        if plan.models.select == "filter":  # ref, params, details after the name
            at = 6 + len(benchmarks)
            rows = [r for r in rows if _selected(plan, r[at], r[at + 1], r[at + 2])]
    unmeasured: list[Unmeasured] = []
    if plan.models.select == "named":
        measured = {r[0] for r in rows}
        unmeasured = [
            Unmeasured(m.id, m.name, m.ref)
            for m in conn.execute(
                select(Model.id, Model.name, Model.ref)
                .where(Model.retired_at.is_(None), _named(plan))
                .order_by(Model.id)
            )
            if m.id not in measured
        ]
    return CacheAnswer(
        plan.id,
        _ranked(plan, rows, [bench_names[b] for b in benchmarks], sqlite_text=sqlite_text),
        sorted(set(bench_names.values())),
        matched,
        unmeasured,
    )


def _ranked(
    plan: Plan, rows: Sequence[Any], names: list[str], *, sqlite_text: bool
) -> list[SliceRow]:
    """The answer's rows, with intervals and ranks among themselves, best first.

    ``rows`` are :func:`_grouped_read`'s, read by position: model_id, n, total,
    chance, updated_at (SQLite's text when ``sqlite_text``), one sample count per
    benchmark of ``names``, name, ref. Ten thousand of them per request: one pass
    each for the intervals, the ranks (``core/ranking.py``) and the rows."""
    bounds = score_intervals([float(row[2]) for row in rows], [row[1] for row in rows])
    scored = [
        (float(row[2]) / row[1], low, high) for row, (low, high) in zip(rows, bounds, strict=True)
    ]
    places = ranks(scored)
    name_at = 5 + len(names)
    order = sorted(range(len(rows)), key=lambda i: (places[i][0], rows[i][name_at], rows[i][0]))
    columns = sorted(enumerate(names, start=5), key=lambda column: column[1])  # by name
    unique = len(set(names)) == len(names)

    def _summed(row: Any) -> dict[str, int]:  # two active versions of one name
        counts: dict[str, int] = {}
        for c, name in columns:
            if row[c]:
                counts[name] = counts.get(name, 0) + row[c]
        return counts

    budget = plan.budget
    out = []
    for i in order:
        row = rows[i]
        n = row[1]
        score, low, high = scored[i]
        rank, best, worst = places[i]
        when = _freshness(row[4]) if sqlite_text else row[4]
        out.append(
            SliceRow(
                row[0],
                row[name_at],
                row[name_at + 1],
                n,
                score,
                low,
                high,
                row[3] / n,
                {name: row[c] for c, name in columns if row[c]} if unique else _summed(row),
                when,
                rank,
                best,
                worst,
                n < budget,
            )
        )
    return out
