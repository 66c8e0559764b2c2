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
   count (exact Clopper–Pearson), the mean chance level, the samples per benchmark and
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

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from quorumbench.core.intervals import score_interval
from quorumbench.core.plans import Plan
from quorumbench.core.ranking import standings
from quorumbench.core.taxonomy import LABEL_KEYS
from quorumbench.db.models import Benchmark, LabelAggregate, LabelSet, Model
from quorumbench.services.context import ServerContext
from quorumbench.services.label_cache import TOTAL
from quorumbench.services.model_metadata import model_size

INTERVALS_KEPT = 1 << 18
"""Intervals remembered per process by (sum, count): with 0/1 scores most slices of
a few hundred samples share their (sum, count) with another model's."""


@dataclass(frozen=True)
class Unmeasured:
    """A model the plan names that has no sample in the slice."""

    model_id: int
    name: str
    ref: str


@dataclass(frozen=True)
class SliceRow:
    """One model's score over the plan's slice of its verified per-sample results."""

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


interval = functools.lru_cache(maxsize=INTERVALS_KEPT)(score_interval)
""":func:`~quorumbench.core.intervals.score_interval`, remembered (the same limits)."""


def _label_sets(session: Session, plan: Plan) -> tuple[list[int], list[str], int]:
    """The label set ids to read (a benchmark's total set where every one of its sets
    matches), the benchmarks they cover, and how many sets matched."""
    covered = {
        row.id: row.name
        for row in session.execute(
            select(Benchmark.id, Benchmark.name, Benchmark.pillar).where(Benchmark.active)
        )
        if plan.covers_benchmark(row.name, row.pillar)
    }
    if not covered:
        return [], [], 0
    total: dict[int, int] = {}
    cells: dict[int, list[int]] = {}
    matched: dict[int, list[int]] = {}
    columns = [getattr(LabelSet, key) for key in LABEL_KEYS]
    for row in session.execute(
        select(LabelSet.id, LabelSet.benchmark_id, *columns).where(
            LabelSet.benchmark_id.in_(covered)
        )
    ):
        labels = dict(zip(LABEL_KEYS, row[2:], strict=True))
        if labels["skill"] == TOTAL:
            total[row.benchmark_id] = row.id
            continue
        cells.setdefault(row.benchmark_id, []).append(row.id)
        if plan.matches(labels):
            matched.setdefault(row.benchmark_id, []).append(row.id)
    ids: list[int] = []
    for bench_id, found in matched.items():
        whole = len(found) == len(cells[bench_id]) and bench_id in total
        ids += [total[bench_id]] if whole else found
    names = sorted(covered[b] for b in matched)
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


@dataclass
class _Slice:
    name: str
    ref: str
    n_samples: int = 0
    total: float = 0.0
    chance: float = 0.0
    updated_at: datetime | None = None
    benchmarks: dict[str, int] = field(default_factory=dict)


def _named(plan: Plan) -> ColumnElement[bool]:
    names = list(plan.models.names)
    return or_(Model.name.in_(names), Model.ref.in_(names))


def answer(ctx: ServerContext, session: Session, plan: Plan) -> CacheAnswer:
    """The plan's board from the cache: no sample rows are scanned (module docstring)."""
    ids, names, matched = _label_sets(session, plan)
    select_ = plan.models.select
    slices: dict[int, _Slice] = {}
    if ids:
        agg = LabelAggregate
        grouped = (
            select(
                agg.model_id,
                agg.benchmark_id,
                func.sum(agg.n_samples).label("n"),
                func.sum(agg.sample_sum).label("total"),
                func.sum(agg.chance_sum).label("chance"),
                func.max(agg.updated_at).label("updated_at"),
            )
            .where(agg.label_set_id.in_(ids))
            .group_by(agg.model_id, agg.benchmark_id)
            .subquery()
        )
        details = [Model.params, Model.details] if select_ == "filter" else []
        query = (
            select(grouped, Model.name, Model.ref, *details)
            .join(Model, Model.id == grouped.c.model_id)
            .where(Model.retired_at.is_(None))
        )
        if select_ == "named":
            query = query.where(_named(plan))
        bench_names = dict(
            session.execute(select(Benchmark.id, Benchmark.name).where(Benchmark.active)).all()
        )
        keep: dict[int, bool] = {}
        for row in session.execute(query):
            if select_ == "filter":
                chosen = keep.get(row.model_id)
                if chosen is None:
                    chosen = keep[row.model_id] = _selected(plan, row.ref, row.params, row.details)
                if not chosen:
                    continue
            found = slices.get(row.model_id)
            if found is None:
                found = slices[row.model_id] = _Slice(row.name, row.ref)
            found.n_samples += int(row.n)
            found.total += float(row.total)
            found.chance += float(row.chance)
            when = row.updated_at
            if found.updated_at is None or when > found.updated_at:
                found.updated_at = when
            found.benchmarks[bench_names[row.benchmark_id]] = int(row.n)
    rows = _ranked(plan, slices)
    unmeasured: list[Unmeasured] = []
    if select_ == "named":
        unmeasured = [
            Unmeasured(m.id, m.name, m.ref)
            for m in session.execute(
                select(Model.id, Model.name, Model.ref)
                .where(Model.retired_at.is_(None), _named(plan))
                .order_by(Model.id)
            )
            if m.id not in slices
        ]
    return CacheAnswer(plan.id, rows, names, matched, unmeasured)


def _ranked(plan: Plan, slices: dict[int, _Slice]) -> list[SliceRow]:
    """The rows, with intervals and ranks among themselves, best first."""
    scored = []
    for model_id, s in slices.items():
        low, high = interval(s.total, s.n_samples)
        scored.append((model_id, s, s.total / s.n_samples, low, high))
    board = standings((score, low, high) for _, _, score, low, high in scored)
    rows = []
    for model_id, s, score, low, high in scored:
        place = board.rank(score, low, high)
        assert s.updated_at is not None
        rows.append(
            SliceRow(
                model_id,
                s.name,
                s.ref,
                s.n_samples,
                score,
                low,
                high,
                s.chance / s.n_samples,
                dict(sorted(s.benchmarks.items())),
                s.updated_at,
                place.rank,
                place.best,
                place.worst,
                s.n_samples < plan.budget,
            )
        )
    rows.sort(key=lambda r: (r.rank, r.name, r.model_id))
    return rows
