"""``quorumbench demo``'s runner processes and its wait for their tasks to be final.

Split from ``cli/demo_cmd.py``: the wait's progress bar, and what the demo says when
a runner dies or time runs out (the open tasks, and each runner's last word on a task,
read from its log).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from quorumbench.errors import QuorumError
from quorumbench.protocol import TaskStatus


@dataclass
class RunnerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]


def demo_tasks(api: httpx.Client, model_ids: list[int]) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for model_id in model_ids:
        tasks += api.get("/v0/tasks", params={"model_id": model_id, "limit": 500}).json()
    return tasks


def wait_for_consensus(
    api: httpx.Client,
    model_ids: list[int],
    runners: list[RunnerProcess],
    timeout_s: float,
    console: Console,
) -> None:
    """Show the demo's tasks becoming final; QuorumError when a runner dies or time
    runs out (naming the open tasks and what each runner last said)."""
    deadline = time.monotonic() + timeout_s
    # The epoch the demo's tasks were made in (held while the runners work: see
    # run_demo); a later epoch's tasks, made by a replica or a registration meanwhile,
    # are not waited for.
    epoch = max((t["epoch"] for t in demo_tasks(api, model_ids)), default=None)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("tasks final", total=None, detail="")
        while True:
            tasks = [t for t in demo_tasks(api, model_ids) if epoch is None or t["epoch"] <= epoch]
            final = [t for t in tasks if t["final"]]
            # An open task shows no result count (it would give canaries away).
            disputed = sum(1 for t in tasks if t["status"] == TaskStatus.DISPUTED)
            detail = f"{disputed} disputed" if disputed else ""
            progress.update(bar, total=len(tasks), completed=len(final), detail=detail)
            if tasks and len(final) == len(tasks):
                break
            dead = [r for r in runners if r.process.poll() is not None]
            if dead:
                tail = dead[0].log_path.read_text(errors="replace")[-2000:]
                raise QuorumError(
                    f"runner {dead[0].name} exited with status {dead[0].process.returncode}; "
                    f"its log ({dead[0].log_path}) ends with:\n{tail}"
                )
            if time.monotonic() > deadline:
                raise QuorumError(
                    f"not every task was final after {timeout_s:.0f} s; "
                    + stall_report(tasks, {r.name: r.log_path for r in runners})
                )
            time.sleep(1.0)


_LEVEL = re.compile(r" (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_STAMP = re.compile(r" ?\[[\d/]+ [\d:]+\]$")


def _last_task_line(log: Path) -> str:
    """The last record of a runner's log that is about a task (``task N …``), its
    wrapped lines joined; "no task yet" when there is none."""
    text = " ".join(log.read_text(errors="replace").split()) if log.is_file() else ""
    records = [_STAMP.sub("", r.strip()) for r in _LEVEL.split(text)]
    about = [r for r in records if re.match(r"task \d+\b", r)]
    return about[-1] if about else "no task yet"


def stall_report(tasks: list[dict[str, Any]], logs: dict[str, Path]) -> str:
    """What is still open (task, benchmark, model, status) and what each runner last
    said about a task (its log's last ``task N …`` line), in one message."""
    open_tasks = [t for t in tasks if not t["final"]]
    described = [
        f"task {t['id']} ({t['benchmark']['name']} on {t['model']['name']}, {t['status']})"
        for t in open_tasks
    ]
    said = [f"{name}: {_last_task_line(path)}" for name, path in logs.items()]
    return (
        f"{len(tasks) - len(open_tasks)} of {len(tasks)} final; still open: "
        f"{', '.join(described) or 'none'}; the runners last said: {'; '.join(said)} "
        f"(their logs: {next(iter(logs.values())).parent if logs else '-'})"
    )
