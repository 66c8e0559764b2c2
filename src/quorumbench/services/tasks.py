"""Reading tasks, their results and consensus outcomes.

The task list of the API (``GET /v0/tasks``) and of the pages (``/tasks``) is cut by
one function, :func:`task_window`: the same statuses, filters and order, by task id
(unique, so a page never repeats or skips a task). The API lists oldest first from
``after_id``; the pages newest first from ``before``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select, select

from quorumbench.db.edge_models import EdgeResult
from quorumbench.db.models import TASK_EDGE, Benchmark, ConsensusOutcome, Model, Result, Task
from quorumbench.errors import ConfigError, NotFoundError
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext
from quorumbench.services.publiclog import public_canary

STATUSES = tuple(TaskStatus)
MAX_LIMIT = 500
"""The most tasks one read of the list gives."""
S = TypeVar("S", bound=Select[*tuple[Any, ...]])


def task_window(
    query: S,
    *,
    status: str | None = None,
    model_id: int | None = None,
    benchmark: str | None = None,
    after_id: int | None = None,
    before_id: int | None = None,
    newest_first: bool = False,
    limit: int = 50,
) -> S:
    """``query`` (a select over ``tasks``) cut to one page of the task list.

    Only tasks of ``status``, ``model_id`` and ``benchmark`` (any version) when given,
    with ids above ``after_id`` and below ``before_id``; in id order, newest first if
    asked; at most ``limit`` (1 to :data:`MAX_LIMIT`) of them.
    """
    if status is not None and status not in STATUSES:
        raise ConfigError(f"unknown status {status!r}; use one of {', '.join(STATUSES)}")
    if status:
        query = query.where(Task.status == status)
    if model_id is not None:
        query = query.where(Task.model_id == model_id)
    if benchmark:
        named = select(Benchmark.id).where(Benchmark.name == benchmark)
        query = query.where(Task.benchmark_id.in_(named))
    if after_id is not None:
        query = query.where(Task.id > after_id)
    if before_id is not None:
        query = query.where(Task.id < before_id)
    order = Task.id.desc() if newest_first else Task.id.asc()
    return query.order_by(order).limit(max(1, min(limit, MAX_LIMIT)))


def _edge_dict(report: EdgeResult) -> dict[str, Any]:
    """An edge report as a final edge task shows it: the figures' means, not every run
    (the public log has the whole report as signed)."""
    figures = report.report

    def mean(name: str) -> float | None:
        stat = figures.get(name)
        return None if stat is None else stat["mean"]

    return {
        "id": report.id,
        "runner_id": report.runner_id,
        "hardware_class": report.hardware_class,
        "counted": report.counted,
        "submitted_at": report.submitted_at,
        "runs": len(figures["runs"]),
        "prefill_tokens_per_s": mean("prefill_tokens_per_s"),
        "decode_tokens_per_s": mean("decode_tokens_per_s"),
        "ttft_s": mean("ttft_s"),
        "peak_rss_bytes": figures.get("peak_rss_bytes"),
        "peak_gpu_bytes": figures.get("peak_gpu_bytes"),
        "notes": figures.get("notes", []),
    }


def _task_dict(
    task: Task,
    model: Model,
    bench: Benchmark,
    results: list[Result],
    outcomes: list[ConsensusOutcome],
    edge: list[EdgeResult],
) -> dict[str, Any]:
    final = task.finalized_at is not None
    extra: dict[str, Any] = {}
    if task.purpose == TASK_EDGE:  # measured, not scored: its reports, once final
        extra["edge_reports"] = [_edge_dict(r) for r in edge] if final else []
    return extra | {
        "id": task.id,
        "status": task.status,
        "final": final,
        "model": {"id": model.id, "name": model.name, "ref": model.ref},
        "benchmark": {"name": bench.name, "version": bench.version},
        "epoch": task.epoch_id,
        "round": task.round,
        "quorum": task.quorum,
        "n_samples": task.n_samples,
        "score": task.score,
        "created_at": task.created_at,
        "finalized_at": task.finalized_at,
        # Individual results are published once the task is final, so runners
        # cannot copy each other's answers while it is open.
        "results": [
            {
                "id": r.id,
                "runner_id": r.runner_id,
                "score": r.score,
                "outputs_sha256": r.outputs_sha256,
                "predictions_sha256": r.predictions_sha256,
                "sample_scores": r.sample_scores,
                "runtime_s": r.runtime_s,
                "measurements": r.measurements,
                "counted": r.counted,
                "outlier": r.outlier,
                "round": r.round,
                "submitted_at": r.submitted_at,
            }
            for r in results
        ]
        if final
        else [],
        # Nor how many there are: a task that has its quorum of results and is still
        # open would give away a canary (see services/results.py).
        "n_results": len(results) if final else None,
        "canary": public_canary(task.canary) if final and task.canary else None,
        "outcomes": [
            {
                "round": o.round,
                "status": o.status,
                "score": o.score,
                "spread": o.spread,
                "agreeing": o.agreeing,
                "outliers": o.outliers,
                "sample_agreement": o.sample_agreement,
                "decided_at": o.decided_at,
            }
            for o in outcomes
        ],
    }


def list_tasks(
    ctx: ServerContext,
    *,
    status: str | None = None,
    model_id: int | None = None,
    benchmark: str | None = None,
    limit: int = 50,
    after_id: int = 0,
) -> list[dict[str, Any]]:
    """Tasks in id order (keyset pagination with ``after_id``; :func:`task_window`)."""
    query = task_window(
        select(Task, Model, Benchmark)
        .join(Model, Model.id == Task.model_id)
        .join(Benchmark, Benchmark.id == Task.benchmark_id),
        status=status,
        model_id=model_id,
        benchmark=benchmark,
        after_id=after_id,
        limit=limit,
    )
    with ctx.db.read() as session:
        rows = session.execute(query).all()
        ids = [t.id for t, _, _ in rows]
        results: dict[int, list[Result]] = {i: [] for i in ids}
        for r in session.scalars(select(Result).where(Result.task_id.in_(ids)).order_by(Result.id)):
            results[r.task_id].append(r)
        outcomes: dict[int, list[ConsensusOutcome]] = {i: [] for i in ids}
        for o in session.scalars(
            select(ConsensusOutcome)
            .where(ConsensusOutcome.task_id.in_(ids))
            .order_by(ConsensusOutcome.round)
        ):
            outcomes[o.task_id].append(o)
        edge: dict[int, list[EdgeResult]] = {i: [] for i in ids}
        edge_ids = [t.id for t, _, _ in rows if t.purpose == TASK_EDGE]
        if edge_ids:
            for e in session.scalars(
                select(EdgeResult).where(EdgeResult.task_id.in_(edge_ids)).order_by(EdgeResult.id)
            ):
                edge[e.task_id].append(e)
        return [_task_dict(t, m, b, results[t.id], outcomes[t.id], edge[t.id]) for t, m, b in rows]


def get_task(ctx: ServerContext, task_id: int) -> dict[str, Any]:
    tasks = list_tasks(ctx, after_id=task_id - 1, limit=1)
    if not tasks or tasks[0]["id"] != task_id:
        raise NotFoundError(f"no task {task_id}")
    return tasks[0]
