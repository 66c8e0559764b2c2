"""Measured efficiency per model and hardware class: shown beside the ranking, never in it.

From the counted results of finalized epoch tasks that carry measurements (protocol
1.1, docs/efficiency.md), grouped by (model, hardware class) with
``core.efficiency.hardware_class``: energy and CO₂ per 1,000 samples, time to first
token, decode speed and peak memory, each a median over the group's results, with the
energy methods and carbon-intensity sources seen (a result whose energy method is
``none`` counts for latency and memory, never for energy or CO₂); and seed 002's efficiency, the
model's aggregate score (the leaderboard's, ``leaderboard_aggregates``) divided by its
kWh per 1,000 samples.

None of this ranks models, and nothing here is read by the leaderboard: the figures
depend on the volunteer's hardware (a GPU draws and computes differently from a
laptop's CPU), on its other load and on how the energy was taken (a meter or an
estimate), so they compare models only within one hardware class, and even there they
are measurements of machines, not cross-checked verdicts. They are shown beside the
ranking (``/efficiency``, the model page, optional leaderboard columns).

Two queries (the results, then the aggregates), grouped in Python; fine at this
project's size (one row per counted result).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from sqlalchemy import select

from quorumbench.core.efficiency import hardware_class, median
from quorumbench.db.models import TASK_EPOCH, LeaderboardAggregate, Model, Result, Task
from quorumbench.errors import ConfigError
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext

SortField = Literal[
    "efficiency",
    "energy_kwh_per_1k",
    "co2_g_per_1k",
    "ttft_s",
    "decode_tokens_per_s",
    "peak_rss_bytes",
    "peak_gpu_bytes",
    "aggregate",
    "n_results",
    "model",
]
SORT_FIELDS: tuple[str, ...] = get_args(SortField)
DESCENDING = frozenset({"efficiency", "decode_tokens_per_s", "aggregate", "n_results"})
"""Fields where more is better, listed largest first; the others smallest first."""
NO_ENERGY = "none"


@dataclass(frozen=True)
class Figures:
    """One model on one hardware class: medians over its measured results."""

    model_id: int
    model: str
    hardware_class: str
    n_results: int
    """Counted results of finalized epoch tasks with measurements, on this class."""
    energy_kwh_per_1k: float | None
    """Median over results of energy_kwh / samples × 1000 (results whose method is
    ``none`` are left out); None when no result measured energy."""
    co2_g_per_1k: float | None
    ttft_s: float | None
    decode_tokens_per_s: float | None
    peak_rss_bytes: float | None
    peak_gpu_bytes: float | None
    energy_methods: dict[str, int] = field(default_factory=dict)
    """How each result's energy was taken (``{"estimate": 12, "none": 1}``)."""
    carbon_sources: dict[str, int] = field(default_factory=dict)
    """The carbon intensities the CO₂ was computed with (``{"world-average": 12}``)."""
    aggregate: float | None = None
    """The model's aggregate score on the leaderboard (None: not ranked)."""
    efficiency: float | None = None
    """``aggregate / energy_kwh_per_1k`` (seed 002); None when either is unknown or the
    energy is zero."""


@dataclass(frozen=True)
class ClassCount:
    hardware_class: str
    n_results: int
    n_models: int


@dataclass(frozen=True)
class Overview:
    """Every measured (model, hardware class) and the classes, most results first."""

    figures: list[Figures]
    classes: list[ClassCount]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _per_1k(measured: dict[str, Any], key: str, n: int) -> float | None:
    value = _number(measured.get(key))
    if measured.get("energy_method", NO_ENERGY) == NO_ENERGY or value is None or n <= 0:
        return None
    return value / n * 1000


def _figures(
    model_id: int, name: str, klass: str, rows: list[tuple[int, dict[str, Any]]], agg: float | None
) -> Figures:
    energy = _median(_per_1k(m, "energy_kwh", n) for n, m in rows)
    methods = Counter(str(m.get("energy_method", NO_ENERGY)) for _, m in rows)
    sources = Counter(
        str(m["carbon_intensity_source"]) for _, m in rows if m.get("carbon_intensity_source")
    )
    return Figures(
        model_id=model_id,
        model=name,
        hardware_class=klass,
        n_results=len(rows),
        energy_kwh_per_1k=energy,
        co2_g_per_1k=_median(_per_1k(m, "co2_g", n) for n, m in rows),
        ttft_s=_median(_number(m.get("ttft_s")) for _, m in rows),
        decode_tokens_per_s=_median(_number(m.get("decode_tokens_per_s")) for _, m in rows),
        peak_rss_bytes=_median(_number(m.get("peak_rss_bytes")) for _, m in rows),
        peak_gpu_bytes=_median(_number(m.get("peak_gpu_bytes")) for _, m in rows),
        energy_methods=dict(sorted(methods.items())),
        carbon_sources=dict(sorted(sources.items())),
        aggregate=agg,
        efficiency=agg / energy if agg is not None and energy else None,
    )


def overview(ctx: ServerContext, *, model_id: int | None = None) -> Overview:
    """Every model's (or one model's) figures per hardware class, and the classes.

    Retired models are left out, as from the board; a model without a complete
    aggregate has figures but no efficiency."""
    query = (
        select(Task.model_id, Model.name, Result.n, Result.hardware, Result.measurements)
        .join(Task, Task.id == Result.task_id)
        .join(Model, Model.id == Task.model_id)
        .where(
            Result.counted,
            Result.measurements.is_not(None),
            Task.status == TaskStatus.DONE,
            Task.purpose == TASK_EPOCH,
            Model.retired_at.is_(None),
        )
    )
    if model_id is not None:
        query = query.where(Task.model_id == model_id)
    groups: dict[tuple[int, str], list[tuple[int, dict[str, Any]]]] = {}
    names: dict[int, str] = {}
    with ctx.db.read() as session:
        for mid, name, n, hardware, measured in session.execute(query):
            if not isinstance(measured, dict):  # a JSON null
                continue
            machine = (hardware or {}).get("hardware") or {}
            klass = hardware_class(machine if isinstance(machine, dict) else {})
            groups.setdefault((mid, klass), []).append((n, measured))
            names[mid] = name
        aggregates: dict[int, float] = {
            mid: score
            for mid, score in session.execute(
                select(LeaderboardAggregate.model_id, LeaderboardAggregate.score).where(
                    LeaderboardAggregate.model_id.in_(names), LeaderboardAggregate.complete
                )
            )
        }
    figures = [
        _figures(mid, names[mid], klass, rows, aggregates.get(mid))
        for (mid, klass), rows in groups.items()
    ]
    results: Counter[str] = Counter()
    models: Counter[str] = Counter()
    for f in figures:
        results[f.hardware_class] += f.n_results
        models[f.hardware_class] += 1
    classes = [
        ClassCount(k, results[k], models[k])
        for k in sorted(results, key=lambda k: (-results[k], k))
    ]
    return Overview(sorted(figures, key=lambda f: (f.hardware_class, f.model)), classes)


def check_sort(sort: str) -> str:
    if sort not in SORT_FIELDS:
        raise ConfigError(f"sort must be one of {', '.join(SORT_FIELDS)}, not {sort!r}")
    return sort


def in_class(found: Overview, klass: str | None, sort: str = "efficiency") -> list[Figures]:
    """The figures of one hardware class (None: the class with the most results),
    sorted by ``sort`` (best first; unknown values last, then by model name)."""
    check_sort(sort)
    shown = chosen_class(found, klass)
    rows = [f for f in found.figures if f.hardware_class == shown]
    if sort == "model":
        return sorted(rows, key=lambda f: (f.model, f.model_id))
    sign = -1 if sort in DESCENDING else 1

    def key(f: Figures) -> tuple[bool, float, str, int]:
        value = getattr(f, sort)
        return (value is None, sign * (value or 0.0), f.model, f.model_id)

    return sorted(rows, key=key)


def chosen_class(found: Overview, klass: str | None) -> str | None:
    """The class shown: the one asked for, else the most common (None: no data)."""
    if klass:
        return klass
    return found.classes[0].hardware_class if found.classes else None


def by_model(found: Overview, klass: str) -> dict[int, Figures]:
    """One hardware class's figures by model id (the leaderboard's optional columns)."""
    return {f.model_id: f for f in found.figures if f.hardware_class == klass}


_COUNTS = ("energy_methods", "carbon_sources")
CSV_COLUMNS: tuple[str, ...] = (
    *(f.name for f in fields(Figures) if f.name not in _COUNTS),
    *_COUNTS,
)
"""The CSV's columns: a ``Figures``' fields, its counts written ``estimate:12 rapl:3``."""


def csv_text(rows: Iterable[Figures]) -> str:
    """Figures as CSV (the API's and the page's downloads)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in rows:
        flat = asdict(row)
        for key in _COUNTS:
            flat[key] = " ".join(f"{k}:{v}" for k, v in flat[key].items())
        writer.writerow(flat)
    return buffer.getvalue()
