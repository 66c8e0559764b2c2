"""What the ``/ask`` pages show of an answer: its rows (verified models from the cache,
the person's own endpoints beside them), their freshness in words, the plan as JSON
and YAML, and the same rows as JSON and CSV downloads.

Nothing is computed here that the services compute: ranks, intervals and counts are
the cache's (``services/ask_cache.py``) and the live evaluation's
(``services/asks.py``), only laid out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import yaml

from quorumbench.core.plans import Plan
from quorumbench.services.ask_cache import CacheAnswer
from quorumbench.services.asks import AskStatus, AskView, EndpointRow
from quorumbench.web.data import to_csv

CSV_COLUMNS = [
    "rank",
    "best",
    "worst",
    "model",
    "ref",
    "score",
    "ci_low",
    "ci_high",
    "n_samples",
    "benchmarks",
    "updated_at",
    "thin",
    "cross_checked",
]


@dataclass(frozen=True)
class Row:
    """One row of the answer board."""

    model: str
    ref: str
    score: float | None
    ci_low: float | None
    ci_high: float | None
    n_samples: int
    benchmarks: dict[str, int]
    updated_at: datetime | None
    thin: bool
    rank: int | None = None
    best: int | None = None
    worst: int | None = None
    model_id: int | None = None
    endpoint: bool = False
    """A person's own endpoint: one evaluation, not cross-checked."""
    status: str | None = None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "best": self.best,
            "worst": self.worst,
            "model_id": self.model_id,
            "model": self.model,
            "ref": self.ref,
            "score": self.score,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n_samples": self.n_samples,
            "benchmarks": self.benchmarks,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "thin": self.thin,
            "cross_checked": not self.endpoint,
            "status": self.status,
            "error": self.error,
        }


def cache_rows(answer: CacheAnswer) -> list[Row]:
    return [
        Row(
            r.name,
            r.ref,
            r.score,
            r.ci_low,
            r.ci_high,
            r.n_samples,
            dict(r.benchmarks),
            r.updated_at,
            r.thin,
            r.rank,
            r.best,
            r.worst,
            r.model_id,
        )
        for r in answer.rows
    ]


def endpoint_rows(rows: list[EndpointRow], ask: AskView, budget: int) -> list[Row]:
    return [
        Row(
            e.model,
            e.url,
            e.score,
            e.ci_low,
            e.ci_high,
            e.n_samples,
            dict(e.benchmarks),
            ask.finished_at,
            e.n_samples < budget,
            endpoint=True,
            status=str(e.status),
            error=e.error,
        )
        for e in rows
    ]


def ago(then: datetime | None, now: datetime) -> str:
    """How long ago, in words: ``just now``, ``5 minutes ago``, ``3 days ago``."""
    if then is None:
        return "—"
    seconds = max(0.0, (now - then) / timedelta(seconds=1))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return "just now"


def plan_json_text(plan: Plan) -> str:
    return json.dumps(plan.as_json(), indent=2, ensure_ascii=False)


def plan_yaml_text(plan: Plan) -> str:
    text: str = yaml.safe_dump(plan.as_json(), sort_keys=False, allow_unicode=True)
    return text


def board_json(plan: Plan, rows: list[Row], ask: AskView | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "plan_id": plan.public().id,
        "plan": plan.public().as_json(),
        "rows": [r.as_json() for r in rows],
    }
    if ask is not None:
        out["ask"] = progress_json(ask)
    return out


def board_csv(rows: list[Row]) -> str:
    flat = []
    for row in rows:
        data = row.as_json()
        data["benchmarks"] = " ".join(f"{k}:{v}" for k, v in sorted(row.benchmarks.items()))
        flat.append({k: data[k] for k in CSV_COLUMNS})
    return to_csv(CSV_COLUMNS, flat)


def progress_json(ask: AskView) -> dict[str, Any]:
    """What the page's poller reads: status, progress, the error, deepening."""
    return {
        "id": ask.id,
        "status": str(ask.status),
        "done": ask.status in (AskStatus.SUCCESS, AskStatus.FAILURE),
        "progress": {"done": ask.progress_done, "total": ask.progress_total},
        "error": ask.error,
        "finished_at": ask.finished_at.isoformat() if ask.finished_at else None,
        "deepen": _deepen_progress(ask),
    }


def _deepen_progress(ask: AskView) -> dict[str, Any] | None:
    """The deepening's progress counts (``services/deepen.progress``), if it was asked."""
    if not ask.deepen:
        return None
    progress = ask.deepen.get("progress", ask.deepen)
    data: dict[str, Any] = json.loads(json.dumps(dict(progress), default=str))
    return data
