"""One runner's page: its contributions and its measurement flags.

A flag (``results.measurement_outlier``, ``services/measurement_check.py``) says that a
result's energy per sample was more than ``measurement_outlier_factor`` off the median
of its hardware class on that task. It is shown here and in the runners list only: it
changes no score, consensus, leaderboard row or reputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select

from quorumbench.core.measurement_check import ENERGY, quantities
from quorumbench.db.measurement_models import TaskMeasurement
from quorumbench.db.models import Benchmark, Model, Result, Task
from quorumbench.errors import NotFoundError
from quorumbench.services.context import ServerContext
from quorumbench.services.views.runners import RunnerRow, runner_rows

FLAGGED_SHOWN = 10
"""The latest flagged results a runner's page lists."""


@dataclass(frozen=True)
class FlaggedResult:
    """A flagged result beside its hardware class's median on its task."""

    result_id: int
    task_id: int
    model: str
    benchmark: str
    hardware_class: str | None
    energy_kwh_per_sample: float | None
    class_median_kwh_per_sample: float | None
    class_results: int | None
    """How many agreeing results of its class measured that task (the median's base)."""
    finalized_at: datetime | None

    @property
    def ratio(self) -> float | None:
        """Its energy per sample over the class median (None: not computable)."""
        mine, mid = self.energy_kwh_per_sample, self.class_median_kwh_per_sample
        return None if mine is None or not mid else mine / mid


@dataclass(frozen=True)
class RunnerDetail:
    runner: RunnerRow
    flagged: list[FlaggedResult]
    """The latest flagged results, newest first (at most ``FLAGGED_SHOWN``)."""
    outlier_factor: float


def runner_detail(ctx: ServerContext, runner_id: int) -> RunnerDetail:
    """The runner with its latest flagged results; NotFoundError for an unknown id."""
    rows = runner_rows(ctx, runner_id=runner_id)
    if not rows:
        raise NotFoundError(f"no runner {runner_id}")
    query = (
        select(
            Result.id,
            Result.task_id,
            Result.n,
            Result.hardware_class,
            Result.measurements,
            Model.name.label("model"),
            Benchmark.name.label("benchmark"),
            Task.finalized_at,
            TaskMeasurement.energy_kwh_per_sample_median.label("median"),
            TaskMeasurement.n.label("class_n"),
        )
        .join(Task, Task.id == Result.task_id)
        .join(Model, Model.id == Task.model_id)
        .join(Benchmark, Benchmark.id == Task.benchmark_id)
        .outerjoin(
            TaskMeasurement,
            and_(
                TaskMeasurement.task_id == Result.task_id,
                TaskMeasurement.hardware_class == Result.hardware_class,
            ),
        )
        .where(Result.runner_id == runner_id, Result.measurement_outlier)
        .order_by(Result.id.desc())
        .limit(FLAGGED_SHOWN)
    )
    with ctx.db.read() as session:
        flagged = [
            FlaggedResult(
                r.id,
                r.task_id,
                r.model,
                r.benchmark,
                r.hardware_class,
                quantities(r.measurements or {}, r.n).get(ENERGY),
                r.median,
                r.class_n,
                r.finalized_at,
            )
            for r in session.execute(query)
        ]
    return RunnerDetail(rows[0], flagged, ctx.settings.measurement_outlier_factor)
