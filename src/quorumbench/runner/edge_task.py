"""Edge tasks on the runner: run the edge workload a lease names, and report it.

An edge task (protocol 1.2, ``TaskBenchmark.kind == "edge"``) scores nothing: the
runner loads the model as for any task (sandboxed the same way), runs
:func:`~quorumbench.evaluation.edge.run_edge` with the workload and repeat rule of the
task's benchmark ``config``, and sends the figures as a signed
:class:`~quorumbench.protocol.EdgeReport` (docs/efficiency.md, "The edge benchmark").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from rich.console import Console

from quorumbench.core.efficiency import MeanSd
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.edge import (
    EDGE_KIND,
    EDGE_VERSION,
    EdgeResult,
    EdgeSettings,
    run_edge,
    workload_sha256,
)
from quorumbench.protocol import (
    EdgeReport,
    EdgeRunOut,
    EdgeStat,
    EdgeWorkload,
    Hardware,
    Task,
)
from quorumbench.runner.faults import RunnerSetupError
from quorumbench.runner.progress import task_progress


def is_edge(task: Task) -> bool:
    """Whether ``task`` is an edge task (measured, not scored)."""
    return task.benchmark.kind == EDGE_KIND


def edge_settings(task: Task) -> EdgeSettings:
    """The workload an edge task asks for, checked against this runner's.

    A workload text other than this runner's (another ``quorumbench`` version) is this
    runner's setup, not the task's fault (RunnerSetupError); options that do not make
    a workload are the task's (ConfigError, reported as a failure)."""
    if task.benchmark.version != EDGE_VERSION or task.benchmark.dataset_sha256 != (
        workload_sha256()
    ):
        raise RunnerSetupError(
            f"the server's edge workload (version {task.benchmark.version}) is not this "
            f"runner's (version {EDGE_VERSION}): upgrade quorumbench on the runner "
            "(pip install -U quorumbench) or the server"
        )
    return EdgeSettings.from_config(task.benchmark.config)


def _stat(value: MeanSd | None) -> EdgeStat | None:
    return None if value is None else EdgeStat(mean=value.mean, sd=value.sd, n=value.n)


def edge_report(task_id: int, result: EdgeResult) -> EdgeReport:
    """The ``result`` body of an edge submission, from :func:`run_edge`'s result."""
    wall, generated = _stat(result.wall_s), _stat(result.generated_tokens)
    assert wall is not None and generated is not None  # run_edge measures at least one run
    return EdgeReport(
        task_id=task_id,
        edge_version=EDGE_VERSION,
        settings=EdgeWorkload(**asdict(result.settings)),
        prefill_tokens_per_s=_stat(result.prefill_tokens_per_s),
        decode_tokens_per_s=_stat(result.decode_tokens_per_s),
        ttft_s=_stat(result.ttft_s),
        wall_s=wall,
        generated_tokens=generated,
        forced_length=result.forced_length,
        peak_rss_bytes=result.peak_rss_bytes,
        peak_gpu_bytes=result.peak_gpu_bytes,
        runs=[EdgeRunOut(**asdict(run)) for run in result.runs],
        hardware=Hardware.model_validate(
            {
                "hardware": result.hardware,
                "libraries": result.libraries,
                "batch_size": 1,
                "device": result.model.get("device"),
            }
        ),
        model_revision=result.model.get("revision"),
        notes=[note[:500] for note in result.notes],
    )


def run_edge_task(
    task: Task,
    settings: EdgeSettings,
    backend: ModelBackend,
    checkpoint: Callable[[int], None],
    console: Console | None,
) -> EdgeReport:
    """Run the edge workload ``settings`` of ``task`` on its loaded model; the report.

    ``checkpoint`` is called after every run (it raises to stop: a lost lease, a stop
    request, the time limit)."""
    total = settings.warmup + settings.min_runs  # at least; the time rule may add runs
    label = f"task {task.id} edge × {task.model.ref}"
    with task_progress(console, task.id, label, total, unit="runs") as advance:

        def progress(phase: str, done: int, elapsed_s: float) -> None:
            advance(1)
            checkpoint(1)

        result = run_edge(backend, settings, progress)
    return edge_report(task.id, result)
