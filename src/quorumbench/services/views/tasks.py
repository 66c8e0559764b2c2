"""The task list (``/tasks``, the model page's recent tasks) and one task's page."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from quorumbench.db.models import Account, Benchmark, ConsensusOutcome, Model, Result, Runner, Task
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext
from quorumbench.services.failures import Failure, recent_failures
from quorumbench.services.subjects import subject_labels
from quorumbench.services.tasks import get_task, task_window
from quorumbench.services.views import FAILURES_SHOWN


@dataclass(frozen=True)
class TaskSummary:
    id: int
    model_id: int
    model: str
    benchmark: str
    epoch: int
    status: TaskStatus
    score: float | None
    spread: float | None
    round: int
    runners: list[int]
    """Runner ids of the results, once the task is final (hidden before)."""
    outliers: list[int]
    """Those of them whose result was an outlier."""
    finalized_at: datetime | None
    runner_names: list[str] = field(default_factory=list)
    """``account/runner`` for each of ``runners``."""


def benchmark_names(session: Session) -> dict[int, str]:
    """Every benchmark version's name by id (inactive ones too, for old tasks)."""
    return {
        bench_id: name for bench_id, name in session.execute(select(Benchmark.id, Benchmark.name))
    }


def task_summaries(
    session: Session,
    query: Select[Task],
    names: dict[int, str] | None,
    benches: dict[int, str],
) -> list[TaskSummary]:
    """The tasks ``query`` selects, with their runners once final and their last round's
    spread; ``names`` gives model names by id (None: read them)."""
    tasks: list[Task] = list(session.scalars(query))
    ids = [t.id for t in tasks]
    if names is None:
        model_ids = {t.model_id for t in tasks}
        query_names = select(Model.id, Model.name).where(Model.id.in_(model_ids))
        names = {model_id: name for model_id, name in session.execute(query_names)}
    runners: dict[int, list[int]] = {i: [] for i in ids}
    outliers: dict[int, list[int]] = {i: [] for i in ids}
    labels: dict[int, list[str]] = {i: [] for i in ids}
    final = {t.id for t in tasks if t.finalized_at is not None}
    for row in session.execute(
        select(Result.task_id, Result.runner_id, Result.outlier, Runner.name, Account.name)
        .join(Runner, Runner.id == Result.runner_id)
        .join(Account, Account.id == Runner.account_id)
        .where(Result.task_id.in_(final))
        .order_by(Result.id)
    ):
        task_id, runner_id, outlier, runner_name, account = row
        runners[task_id].append(runner_id)
        labels[task_id].append(f"{account}/{runner_name}")
        if outlier:
            outliers[task_id].append(runner_id)
    outcomes: dict[int, ConsensusOutcome] = {}
    for o in session.scalars(
        select(ConsensusOutcome)
        .where(ConsensusOutcome.task_id.in_(ids))
        .order_by(ConsensusOutcome.round)
    ):
        outcomes[o.task_id] = o  # the last round's
    out = []
    for t in tasks:
        outcome = outcomes.get(t.id)
        out.append(
            TaskSummary(
                t.id,
                t.model_id,
                names.get(t.model_id, str(t.model_id)),
                benches.get(t.benchmark_id, str(t.benchmark_id)),
                t.epoch_id,
                t.status,
                t.score,
                outcome.spread if outcome else None,
                t.round,
                runners[t.id],
                outliers[t.id],
                t.finalized_at,
                labels[t.id],
            )
        )
    return out


def task_list(
    ctx: ServerContext, *, status: str | None = None, limit: int = 50, before_id: int | None = None
) -> list[TaskSummary]:
    """Tasks, newest first (keyset pagination with ``before_id``; the API's list cut the
    other way, ``services/tasks.py``)."""
    query = task_window(
        select(Task), status=status, before_id=before_id, newest_first=True, limit=limit
    )
    with ctx.db.read() as session:
        return task_summaries(session, query, None, benchmark_names(session))


@dataclass(frozen=True)
class SampleRow:
    """One sample of a final task: its consensus value and each result's score."""

    id: str
    subject: str | None
    consensus: float | None
    scores: list[float | None]
    """Per result, in the order of the task's ``results``."""


@dataclass(frozen=True)
class TaskDetail:
    task: dict[str, Any]
    """The public view of the task (``services.tasks.get_task``): no results while open."""
    runner_names: dict[int, str]
    """``account/runner`` of each result's runner."""
    samples: list[SampleRow]
    """Empty while the task is open (its sample ids are not public before)."""
    failures: list[Failure] = field(default_factory=list)
    """Its newest failure reports (reason and time only; shown while open too)."""


def task_detail(ctx: ServerContext, task_id: int) -> TaskDetail:
    """One task with who said what, per sample, once it is final."""
    task = get_task(ctx, task_id)
    with ctx.db.read() as session:
        failures = recent_failures(session, task_id=task_id, limit=FAILURES_SHOWN)
    if not task["final"]:
        return TaskDetail(task, {}, [], failures)
    results = task["results"]
    with ctx.db.read() as session:
        runner_ids = {r["runner_id"] for r in [*results, *task.get("edge_reports", [])]}
        names = {
            runner_id: f"{account}/{name}"
            for runner_id, name, account in session.execute(
                select(Runner.id, Runner.name, Account.name)
                .join(Account, Account.id == Runner.account_id)
                .where(Runner.id.in_(runner_ids))
            )
        }
        row = session.execute(
            select(Task.sample_ids, Benchmark.name, Benchmark.version, Benchmark.dataset_sha256)
            .join(Benchmark, Benchmark.id == Task.benchmark_id)
            .where(Task.id == task_id)
        ).one()
        last = session.scalars(
            select(ConsensusOutcome.sample_consensus)
            .where(ConsensusOutcome.task_id == task_id)
            .order_by(ConsensusOutcome.round.desc())
            .limit(1)
        ).first()
    ids: list[str] = list(row.sample_ids)
    subjects = subject_labels(ctx, row.name, row.version, row.dataset_sha256, ids)
    consensus = list(last or [])
    samples = [
        SampleRow(
            sample_id,
            subjects.get(sample_id),
            consensus[i] if i < len(consensus) else None,
            [r["sample_scores"][i] if i < len(r["sample_scores"]) else None for r in results],
        )
        for i, sample_id in enumerate(ids)
    ]
    return TaskDetail(task, names, samples, failures)
