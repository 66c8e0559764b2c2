"""The compare page: two to four models side by side, per benchmark and per subject."""

from __future__ import annotations

from dataclasses import dataclass, field

from quorumbench.core.comparison import SubjectScore, separated
from quorumbench.errors import ConfigError
from quorumbench.services.board import Score, active_benchmarks
from quorumbench.services.context import ServerContext
from quorumbench.services.leaderboard import AGGREGATE
from quorumbench.services.lineage import ModelLink
from quorumbench.services.model_metadata import ModelSize
from quorumbench.services.views.model import model_view


@dataclass(frozen=True)
class CompareView:
    models: list[ModelLink]
    benchmarks: list[str]
    scores: list[dict[str, Score]]
    """Per model (same order), per benchmark; ``aggregate`` when complete."""
    separated: dict[str, bool]
    """Per benchmark: whether some pair of the models' intervals does not overlap."""
    subjects: dict[str, list[str]] = field(default_factory=dict)
    """Per benchmark with a subject breakdown: its subjects, most samples first."""
    subject_scores: list[dict[tuple[str, str], SubjectScore]] = field(default_factory=list)
    """Per model (same order), per (benchmark, subject)."""
    subject_separated: dict[tuple[str, str], bool] = field(default_factory=dict)
    sizes: list[ModelSize] = field(default_factory=list)
    """Per model (same order): its size (base + adapter for a LoRA adapter)."""


def _separated(intervals: list[Score] | list[SubjectScore]) -> bool:
    return separated([(s.ci_low, s.ci_high) for s in intervals])


def compare(ctx: ServerContext, model_ids: list[int]) -> CompareView:
    """Two to four models side by side, per benchmark and per subject."""
    if not 2 <= len(model_ids) <= 4 or len(set(model_ids)) != len(model_ids):
        raise ConfigError("compare two to four different models (models=ID,ID,...)")
    benchmarks = active_benchmarks(ctx)
    views = [model_view(ctx, i, recent=0) for i in model_ids]
    scores = [{**v.scores, **({AGGREGATE: v.aggregate} if v.aggregate else {})} for v in views]
    by_benchmark = {
        name: _separated([s[name] for s in scores if name in s])
        for name in [*benchmarks, AGGREGATE]
    }
    by_model = [
        {(bench, s.subject): s for bench, rows in v.subjects.items() for s in rows} for v in views
    ]
    totals: dict[tuple[str, str], int] = {}
    for rows in by_model:
        for key, s in rows.items():
            totals[key] = totals.get(key, 0) + s.n_samples
    subjects: dict[str, list[str]] = {}
    for bench, subject in sorted(totals, key=lambda k: (k[0], -totals[k], k[1])):
        subjects.setdefault(bench, []).append(subject)
    return CompareView(
        [ModelLink(v.id, v.name, v.ref) for v in views],
        benchmarks,
        scores,
        by_benchmark,
        subjects,
        by_model,
        {key: _separated([m[key] for m in by_model if key in m]) for key in totals},
        [v.size for v in views],
    )
