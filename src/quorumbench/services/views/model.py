"""The model page: scores, history, recent tasks, lineage, subjects, depth, failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from quorumbench.core.comparison import SubjectScore
from quorumbench.core.leaderboard import Interval
from quorumbench.db.models import (
    TASK_EPOCH,
    Benchmark,
    LeaderboardAggregate,
    LeaderboardEntry,
    Model,
    Task,
)
from quorumbench.errors import NotFoundError
from quorumbench.protocol import TaskStatus
from quorumbench.services.board import ModelType, Score, model_type, to_score
from quorumbench.services.context import ServerContext
from quorumbench.services.failures import Failure, recent_failures
from quorumbench.services.leaderboard import stored_pillars
from quorumbench.services.lineage import ModelLink, lineage, revision_url
from quorumbench.services.model_metadata import ModelSize, model_size
from quorumbench.services.scheduler import Depth, model_depths
from quorumbench.services.subjects import by_subject
from quorumbench.services.views import FAILURES_SHOWN
from quorumbench.services.views.tasks import TaskSummary, benchmark_names, task_summaries


@dataclass(frozen=True)
class ModelView:
    id: int
    name: str
    ref: str
    type: ModelType
    revision: str
    revision_url: str | None
    params: int | None
    architecture: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    license: str | None
    created_at: datetime
    scores: dict[str, Score]
    aggregate: Score | None
    history: dict[str, list[tuple[int, float]]]
    """Per benchmark, (epoch, score) of each DONE task, in epoch order."""
    tasks: list[TaskSummary]
    base: ModelLink | None
    adapters: list[ModelLink] = field(default_factory=list)
    subjects: dict[str, list[SubjectScore]] = field(default_factory=dict)
    """Per benchmark with two or more subjects: scores per subject (:func:`by_subject`)."""
    base_ref: str | None = None
    """The pinned base an adapter was made on (``base`` may be another revision)."""
    paused_at: datetime | None = None
    """Set while the model is paused because its tasks kept failing (services/failures.py)."""
    paused_reason: str | None = None
    failures: list[Failure] = field(default_factory=list)
    """Its newest failure reports, shortened, without who reported them."""
    size: ModelSize = ModelSize(None)
    """Its size: base + adapter for a LoRA adapter (:func:`model_size`)."""
    depths: dict[str, Depth] = field(default_factory=dict)
    """Per active benchmark: its depth tier and how many samples its next task asks for."""
    retired_at: datetime | None = None
    pillars: dict[str, Interval] = field(default_factory=dict)
    """Its pillar scores (chance-corrected, core/pillars.py), for the pillars it has."""
    missing_pillars: tuple[str, ...] = ()
    """Pillars of positive weight it has no score on (then it has no aggregate)."""
    engine: str | None = None
    """The engine family that evaluates its tasks (protocol 1.3); None for a plugin's."""
    """Set once its owner (or an admin) retired it: off the board and the schedule."""


def model_view(ctx: ServerContext, model_id: int, *, recent: int = 20) -> ModelView:
    """Everything the model page shows."""
    with ctx.db.read() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise NotFoundError(f"no model {model_id}")
        benches = benchmark_names(session)
        active = set(session.scalars(select(Benchmark.id).where(Benchmark.active)))
        scores = {
            benches[e.benchmark_id]: to_score(e)
            for e in session.scalars(
                select(LeaderboardEntry).where(LeaderboardEntry.model_id == model_id)
            )
            if e.benchmark_id in active
        }
        agg = session.get(LeaderboardAggregate, model_id)
        history: dict[str, list[tuple[int, float]]] = {}
        for bench_id, epoch, score in session.execute(
            select(Task.benchmark_id, Task.epoch_id, Task.score)
            .where(
                Task.model_id == model_id,
                Task.status == TaskStatus.DONE,
                Task.score.is_not(None),
                Task.purpose == TASK_EPOCH,
            )
            .order_by(Task.epoch_id, Task.id)
        ):
            history.setdefault(benches[bench_id], []).append((epoch, score or 0.0))
        tasks = task_summaries(
            session,
            select(Task).where(Task.model_id == model_id).order_by(Task.id.desc()).limit(recent),
            {model.id: model.name},
            benches,
        )
        base, adapters = lineage(session, model)
        return ModelView(
            model.id,
            model.name,
            model.ref,
            model_type(model.ref, model.details or {}),
            model.revision,
            revision_url(model.ref, model.revision),
            model.params,
            model.architecture,
            model.context_length,
            model.dtype,
            model.quantization,
            model.license,
            model.created_at,
            scores,
            to_score(agg) if agg is not None and agg.complete else None,
            history,
            tasks,
            base,
            adapters,
            by_subject(ctx, session, model_id),
            model.base_ref,
            model.paused_at,
            model.paused_reason,
            recent_failures(session, model_id=model_id, limit=FAILURES_SHOWN),
            model_size(model.params, model.details),
            model_depths(ctx, model_id),
            model.retired_at,
            stored_pillars(agg.pillars) if agg is not None else {},
            tuple(agg.missing_pillars or ()) if agg is not None else (),
            model.engine,
        )
