"""The pages' tables as plain JSON-ready dicts, and CSV of them (downloads, export)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from quorumbench.services.board import BoardPage, BoardRow, Score
from quorumbench.services.edge_board import EdgeFigures
from quorumbench.services.efficiency import Figures
from quorumbench.services.failures import Failure
from quorumbench.services.views.compare import CompareView
from quorumbench.services.views.model import ModelView
from quorumbench.services.views.runners import RunnerRow
from quorumbench.services.views.tasks import TaskDetail, TaskSummary


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def score_dict(score: Score | None) -> dict[str, Any] | None:
    if score is None:
        return None
    return {
        "score": score.score,
        "ci_low": score.ci_low,
        "ci_high": score.ci_high,
        "n_samples": score.n_samples,
        "n_tasks": score.n_tasks,
        "updated_at": _time(score.updated_at),
    }


def board_row(row: BoardRow) -> dict[str, Any]:
    ranked = row.score
    return {
        "rank": row.rank,
        "rank_best": row.rank_range[0] if row.rank_range else None,
        "rank_worst": row.rank_range[1] if row.rank_range else None,
        "model_id": row.model_id,
        "model": row.model,
        "ref": row.ref,
        "type": row.type,
        "params": row.params,
        "effective_params": row.size.effective_params,
        "adapter_params": row.size.adapter_params,
        "license": row.license,
        "score": ranked.score if ranked else None,
        "ci_low": ranked.ci_low if ranked else None,
        "ci_high": ranked.ci_high if ranked else None,
        "n_samples": row.n_samples,
        "updated_at": _time(row.updated_at),
        "disputed_tasks": row.disputed,
        "benchmarks": {name: score_dict(s) for name, s in sorted(row.scores.items())},
        "pillars": {
            name: {"score": p.score, "ci_low": p.ci_low, "ci_high": p.ci_high}
            for name, p in row.pillars.items()
        },
        "missing_pillars": list(row.missing_pillars),
    }


@dataclass(frozen=True)
class Measured:
    """The leaderboard's optional efficiency columns: one hardware class's figures by
    model id (``services.efficiency.by_model``), as the page shows them."""

    hardware_class: str
    figures: Mapping[int, Figures]


MEASURED_NOTE = (
    "Measured on volunteers' hardware of this class: shown beside the ranking, never used "
    "for it (the rows' order and ranks do not depend on it)."
)
BOARD_FIGURES = (
    "n_results", "energy_kwh_per_1k", "energy_methods", "co2_g_per_1k", "carbon_sources",
    "efficiency",
)  # fmt: skip
"""A leaderboard row's efficiency figures (the page's three columns, with their methods
and sources and how many results they are medians of)."""
MODEL_FIGURES = (
    "hardware_class", "n_results", "energy_kwh_per_1k", "energy_methods", "co2_g_per_1k",
    "carbon_sources", "ttft_s", "decode_tokens_per_s", "peak_rss_bytes", "peak_gpu_bytes",
    "efficiency",
)  # fmt: skip
"""A model's figures per hardware class (its page's "Efficiency and edge" table)."""


def figures_dict(figures: Figures, keys: Sequence[str]) -> dict[str, Any]:
    return {key: getattr(figures, key) for key in keys}


def _counts(counts: Mapping[str, int]) -> str:
    """``{"estimate": 12, "rapl": 3}`` as ``estimate:12 rapl:3`` (as /efficiency's CSV)."""
    return " ".join(f"{k}:{v}" for k, v in counts.items())


def board_dict(page: BoardPage, measured: Measured | None = None) -> dict[str, Any]:
    """The leaderboard as JSON; with ``measured``, each row gains ``measured`` (that
    class's figures, or None) and the top level ``efficiency`` says which class and
    that the figures are not used for ranking."""
    rows = [board_row(r) for r in page.rows]
    out: dict[str, Any] = {
        "benchmark": page.query.benchmark or "aggregate",
        "total": page.total,
        "page": page.query.page,
        "pages": page.pages,
        "per_page": page.query.per_page,
        "benchmarks": page.benchmarks,
        "pillar_weights": dict(page.pillars),
        "rows": rows,
    }
    if measured is not None:
        out["efficiency"] = {
            "hardware_class": measured.hardware_class,
            "used_for_ranking": False,
            "note": MEASURED_NOTE,
        }
        for row in rows:
            found = measured.figures.get(row["model_id"])
            row["measured"] = figures_dict(found, BOARD_FIGURES) if found else None
    return out


def board_csv(page: BoardPage, measured: Measured | None = None) -> str:
    """One line per model; the benchmark columns are flattened (``<name>_score`` ...).
    With ``measured``, the efficiency columns follow: ``efficiency_class`` (the class
    they are for, on every line), then the figures, empty where the model has none."""
    rows = []
    for row in page.rows:
        flat = board_row(row)
        benches = flat.pop("benchmarks")
        for name in page.benchmarks:
            s = benches.get(name) or {}
            for key in ("score", "ci_low", "ci_high", "n_samples"):
                flat[f"{name}_{key}"] = s.get(key)
        pillars = flat.pop("pillars")
        for name, _ in page.pillars:
            p = pillars.get(name) or {}
            for key in ("score", "ci_low", "ci_high"):
                flat[f"pillar_{name}_{key}"] = p.get(key)
        flat["missing_pillars"] = " ".join(flat["missing_pillars"])
        if measured is not None:
            flat["efficiency_class"] = measured.hardware_class
            found = measured.figures.get(row.model_id)
            if found:
                flat |= figures_dict(found, BOARD_FIGURES)
                flat["energy_methods"] = _counts(found.energy_methods)
                flat["carbon_sources"] = _counts(found.carbon_sources)
        rows.append(flat)
    header = [
        *board_row_columns(),
        *_bench_columns(page.benchmarks),
        *(f"pillar_{p}_{k}" for p, _ in page.pillars for k in ("score", "ci_low", "ci_high")),
        "missing_pillars",
        *(("efficiency_class", *BOARD_FIGURES) if measured is not None else ()),
    ]
    return to_csv(header, rows)


def board_row_columns() -> list[str]:
    return [
        "rank", "rank_best", "rank_worst", "model_id", "model", "ref", "type", "params",
        "effective_params", "adapter_params",
        "license", "score", "ci_low", "ci_high", "n_samples", "updated_at", "disputed_tasks",
    ]  # fmt: skip


def _bench_columns(benchmarks: Iterable[str]) -> list[str]:
    return [f"{b}_{k}" for b in benchmarks for k in ("score", "ci_low", "ci_high", "n_samples")]


def task_dict(task: TaskSummary) -> dict[str, Any]:
    out = asdict(task)
    out["finalized_at"] = _time(task.finalized_at)
    return out


def model_dict(
    view: ModelView, measured: Iterable[Figures], edge: Iterable[EdgeFigures] = ()
) -> dict[str, Any]:
    """The model page as JSON; ``measured`` is the model's figures per hardware class
    (``services.efficiency.overview(ctx, model_id=...)``), its ``efficiency`` list, and
    ``edge`` its edge figures per class (``services.edge_board``), its ``edge`` list."""
    return {
        "id": view.id,
        "name": view.name,
        "ref": view.ref,
        "type": view.type,
        "revision": view.revision,
        "revision_url": view.revision_url,
        "params": view.params,
        "effective_params": view.size.effective_params,
        "adapter_params": view.size.adapter_params,
        "base_params": view.size.base_params,
        "architecture": view.architecture,
        "context_length": view.context_length,
        "dtype": view.dtype,
        "quantization": view.quantization,
        "engine": view.engine,
        "license": view.license,
        "created_at": _time(view.created_at),
        "scores": {name: score_dict(s) for name, s in sorted(view.scores.items())},
        "aggregate": score_dict(view.aggregate),
        "pillars": {
            name: {"score": p.score, "ci_low": p.ci_low, "ci_high": p.ci_high}
            for name, p in view.pillars.items()
        },
        "missing_pillars": list(view.missing_pillars),
        "history": {
            name: [{"epoch": e, "score": s} for e, s in points]
            for name, points in sorted(view.history.items())
        },
        "tasks": [task_dict(t) for t in view.tasks],
        "base": asdict(view.base) if view.base else None,
        "base_ref": view.base_ref,
        "adapters": [asdict(a) for a in view.adapters],
        "subjects": {name: [asdict(s) for s in rows] for name, rows in view.subjects.items()},
        "paused_at": _time(view.paused_at),
        "paused_reason": view.paused_reason,
        "retired_at": _time(view.retired_at),
        "failures": [failure_dict(f) for f in view.failures],
        "depths": {name: asdict(d) for name, d in sorted(view.depths.items())},
        "efficiency": [figures_dict(f, MODEL_FIGURES) for f in measured],
        "edge": [e.to_json() for e in edge],
    }


def failure_dict(failure: Failure) -> dict[str, Any]:
    """A failure report for the public pages: what and when, never who."""
    return {
        "task_id": failure.task_id,
        "epoch": failure.epoch,
        "benchmark": failure.benchmark,
        "reason": failure.reason,
        "reported_at": _time(failure.reported_at),
    }


MODEL_CSV_COLUMNS = [
    "benchmark", "subject", "score", "ci_low", "ci_high", "n_samples", "n_tasks", "updated_at"
]  # fmt: skip


def model_csv_rows(view: ModelView) -> list[dict[str, Any]]:
    """Per benchmark (and the aggregate), then per (benchmark, subject)."""
    rows = [{"benchmark": n, **(score_dict(s) or {})} for n, s in sorted(view.scores.items())]
    if view.aggregate:
        rows.append({"benchmark": "aggregate", **(score_dict(view.aggregate) or {})})
    rows += [{"benchmark": name, **asdict(s)} for name, subs in view.subjects.items() for s in subs]
    return rows


def task_detail_dict(detail: TaskDetail) -> dict[str, Any]:
    """The API's view of the task, with runner names and, once final, its samples."""
    results = [
        {**r, "runner": detail.runner_names.get(r["runner_id"])} for r in detail.task["results"]
    ]
    return {
        **detail.task,
        "results": results,
        "samples": [asdict(s) for s in detail.samples],
        "failures": [failure_dict(f) for f in detail.failures],
    }


def sample_rows(detail: TaskDetail) -> list[dict[str, Any]]:
    """One row per sample: its subject, consensus and each runner's score."""
    runners = [
        f"{detail.runner_names.get(r['runner_id'], r['runner_id'])} (result {r['id']})"
        for r in detail.task["results"]
    ]
    return [
        {
            "sample": s.id,
            "subject": s.subject,
            "consensus": s.consensus,
            **dict(zip(runners, s.scores, strict=True)),
        }
        for s in detail.samples
    ]


def runner_dict(runner: RunnerRow) -> dict[str, Any]:
    out = asdict(runner)
    out["last_seen_at"] = _time(runner.last_seen_at)
    return out


def compare_rows(view: CompareView) -> list[dict[str, Any]]:
    """One row per (benchmark, model), then per (benchmark, subject, model)."""
    rows = []
    for name in [*view.benchmarks, "aggregate"]:
        for model, scores in zip(view.models, view.scores, strict=True):
            rows.append(
                {
                    "benchmark": name,
                    "subject": None,
                    "model_id": model.id,
                    "model": model.name,
                    **(score_dict(scores.get(name)) or {"score": None}),
                    "intervals_separate": view.separated[name],
                }
            )
    for name, subjects in view.subjects.items():
        for subject in subjects:
            key = (name, subject)
            for model, by_subject in zip(view.models, view.subject_scores, strict=True):
                found = by_subject.get(key)
                rows.append(
                    {
                        "benchmark": name,
                        "subject": subject,
                        "model_id": model.id,
                        "model": model.name,
                        **(
                            {k: v for k, v in asdict(found).items() if k != "subject"}
                            if found
                            else {"score": None}
                        ),
                        "intervals_separate": view.subject_separated[key],
                    }
                )
    return rows


COMPARE_CSV_COLUMNS = [
    "benchmark", "subject", "model_id", "model", "score", "ci_low", "ci_high", "n_samples",
    "n_tasks", "updated_at", "intervals_separate",
]  # fmt: skip


def to_csv(header: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(header), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()
