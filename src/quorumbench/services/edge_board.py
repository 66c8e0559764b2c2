"""Edge figures per model and hardware class: several runners, with their spread.

From the counted reports of edge tasks (``services/edge_results.py``) of this server's
edge workload (``QB_EDGE_PROMPT_TOKENS`` / ``QB_EDGE_GEN_TOKENS``, the current workload
version), grouped by (model, hardware class). Within a group each runner counts once,
with its newest report, so the spread is between machines of the class, not one
machine's repeated days. Per figure (prefill and decode tokens/s, time to first token,
peak memory) the group shows the median of the runners' means, the lowest and the
highest (``core.edge.spread``), and how many runners had it.

Hardware data: nothing here ranks models or is read by the leaderboard (the
``/efficiency`` page and docs/efficiency.md say why).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from quorumbench.core.edge import Spread, spread
from quorumbench.db.edge_models import EdgeResult
from quorumbench.db.models import TASK_EDGE, Benchmark, Model, Task
from quorumbench.evaluation.edge import EDGE_VERSION, edge_benchmark_name
from quorumbench.services.context import ServerContext

FIGURES = (
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "ttft_s",
    "peak_rss_bytes",
    "peak_gpu_bytes",
)


@dataclass(frozen=True)
class EdgeFigures:
    """One model's edge figures on one hardware class."""

    model_id: int
    model_name: str
    hardware_class: str
    workload: str
    runners: int
    """Runners (machines) whose newest report is counted here."""
    latest_at: datetime
    prefill_tokens_per_s: Spread | None
    decode_tokens_per_s: Spread | None
    ttft_s: Spread | None
    peak_rss_bytes: Spread | None
    peak_gpu_bytes: Spread | None
    forced_length: bool
    """Every counted report generated exactly the workload's tokens in every run."""
    notes: tuple[str, ...]
    """The distinct notes of the counted reports (a figure a backend could not give)."""

    def to_json(self) -> dict[str, Any]:
        def part(value: Spread | None) -> dict[str, Any] | None:
            if value is None:
                return None
            return {"median": value.median, "low": value.low, "high": value.high, "n": value.n}

        return {
            "model_id": self.model_id,
            "model": self.model_name,
            "hardware_class": self.hardware_class,
            "workload": self.workload,
            "runners": self.runners,
            "latest_at": self.latest_at.isoformat(),
            **{name: part(getattr(self, name)) for name in FIGURES},
            "forced_length": self.forced_length,
            "notes": list(self.notes),
        }


def _mean(report: dict[str, Any], name: str) -> float | None:
    if name.startswith("peak_"):
        value = report.get(name)
        return None if value is None else float(value)
    stat = report.get(name)
    return None if stat is None else float(stat["mean"])


def edge_figures(
    ctx: ServerContext, *, model_id: int | None = None, hardware_class: str | None = None
) -> list[EdgeFigures]:
    """The edge figures of every (model, hardware class), or of one model or class;
    by model name, then class."""
    s = ctx.settings
    workload = edge_benchmark_name(s.edge_prompt_tokens, s.edge_gen_tokens)
    query = (
        select(
            Task.model_id,
            Model.name,
            EdgeResult.runner_id,
            EdgeResult.hardware_class,
            EdgeResult.report,
            EdgeResult.submitted_at,
        )
        .join(Task, Task.id == EdgeResult.task_id)
        .join(Model, Model.id == Task.model_id)
        .join(Benchmark, Benchmark.id == Task.benchmark_id)
        .where(
            Task.purpose == TASK_EDGE,
            EdgeResult.counted,
            Benchmark.name == workload,
            Benchmark.version == EDGE_VERSION,
        )
        .order_by(EdgeResult.id)
    )
    if model_id is not None:
        query = query.where(Task.model_id == model_id)
    if hardware_class is not None:
        query = query.where(EdgeResult.hardware_class == hardware_class)
    newest: dict[tuple[int, str], dict[int, Any]] = {}
    names: dict[int, str] = {}
    with ctx.db.read() as session:
        for row in session.execute(query):
            names[row.model_id] = row.name
            newest.setdefault((row.model_id, row.hardware_class), {})[row.runner_id] = row
    out = []
    for (model, klass), by_runner in newest.items():
        rows = list(by_runner.values())
        reports = [r.report for r in rows]
        figures = {name: spread([_mean(rep, name) for rep in reports]) for name in FIGURES}
        notes = sorted({note for rep in reports for note in rep.get("notes", [])})
        out.append(
            EdgeFigures(
                model_id=model,
                model_name=names[model],
                hardware_class=klass,
                workload=workload,
                runners=len(rows),
                latest_at=max(r.submitted_at for r in rows),
                forced_length=all(rep.get("forced_length") for rep in reports),
                notes=tuple(notes),
                **figures,
            )
        )
    return sorted(out, key=lambda f: (f.model_name.lower(), f.model_id, f.hardware_class))


@dataclass(frozen=True)
class EdgeSection:
    """What a model page shows of the edge benchmark: the workload and its rows."""

    prompt_tokens: int
    gen_tokens: int
    every_epochs: int
    rows: list[EdgeFigures]


def model_edge(ctx: ServerContext, model_id: int) -> EdgeSection:
    """The model page's edge section of ``model_id``."""
    s = ctx.settings
    rows = edge_figures(ctx, model_id=model_id)
    return EdgeSection(s.edge_prompt_tokens, s.edge_gen_tokens, s.edge_every_epochs, rows)
