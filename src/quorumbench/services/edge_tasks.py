"""Scheduling edge tasks: the edge workload, measured on the runners' hardware.

Every ``QB_EDGE_EVERY_EPOCHS`` epochs (default 24: daily with hourly epochs) each
scheduled model that runs on the runner's own machine gets one edge task
(``tasks.purpose = 'edge'``): the edge workload of ``evaluation/edge.py``, with the
prompt length, generation length and repeat rule of the ``QB_EDGE_*`` settings
(docs/efficiency.md, "The edge benchmark"). It scores nothing.

* **Which models.** Active, not paused, not retired; not an endpoint (``openai:`` or a
  remote plugin: its speed is the endpoint's and the network's, not the runner's
  hardware); and, when the model's context length is known, one that fits the prompt
  and its generation.
* **The benchmark.** Tasks point at a hidden benchmark row named for the workload
  (``edge-512-128``, ``kind`` "edge", ``active`` false: never on the board, never an
  epoch's), whose ``dataset_sha256`` is the digest of the workload text
  (``evaluation.edge.workload_sha256``) and whose ``config`` is the workload and repeat
  rule the runners are handed. A changed repeat rule updates the row's config (the
  figures do not change meaning; each report says the rule it ran); a changed prompt or
  generation length is another workload, another row.
* **Who runs it.** ``QB_EDGE_RUNNERS`` runners of distinct accounts (the task's
  quorum), only runners that speak protocol 1.2 (``queue/sql.py``), after every scored
  task (:data:`EDGE_PRIORITY`): they use a runner's spare time.
* **Closing.** An edge task still open when its model's next one is made is closed:
  DONE with the reports it has (shown with their count), DISPUTED when it has none
  (every runner failed it or none took it).
"""

from __future__ import annotations

import logging

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from quorumbench.backends import is_remote
from quorumbench.db.edge_models import EdgeResult
from quorumbench.db.models import TASK_EDGE, Benchmark, Epoch, Model, Task
from quorumbench.errors import QuorumError
from quorumbench.evaluation.edge import (
    EDGE_KIND,
    EDGE_VERSION,
    EdgeSettings,
    edge_benchmark_name,
    workload_sha256,
)
from quorumbench.logs import event
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext
from quorumbench.services.edge_results import log_edge_task

log = logging.getLogger("quorumbench.scheduler")

EDGE_PRIORITY = 2**30
"""Edge tasks are leased after every scored task (``Task.priority``; lower first)."""


def workload(ctx: ServerContext) -> EdgeSettings:
    """The edge workload and repeat rule of this server's settings."""
    s = ctx.settings
    return EdgeSettings(
        prompt_tokens=s.edge_prompt_tokens,
        gen_tokens=s.edge_gen_tokens,
        warmup=s.edge_warmup,
        min_runs=s.edge_min_runs,
        min_time_s=s.edge_min_time_s,
        max_runs=s.edge_max_runs,
    )


def edge_benchmark(ctx: ServerContext, session: Session, settings: EdgeSettings) -> Benchmark:
    """The hidden benchmark row of this workload, made (or its config updated) here."""
    name = edge_benchmark_name(settings.prompt_tokens, settings.gen_tokens)
    config = settings.to_config()
    session.execute(
        ctx.db.insert(Benchmark)
        .values(
            name=name,
            version=EDGE_VERSION,
            prompt_version=1,
            kind=EDGE_KIND,
            dataset_sha256=workload_sha256(),
            config=config,
            samples_per_task=0,
            weight=0.0,
            active=False,  # hidden: never an epoch's benchmark, never on the board
            created_at=ctx.now(),
            pillar=None,
        )
        .on_conflict_do_nothing(index_elements=["name", "version"])
    )
    row = session.scalars(
        select(Benchmark).where(Benchmark.name == name, Benchmark.version == EDGE_VERSION)
    ).one()
    if row.kind != EDGE_KIND:
        raise QuorumError(f"benchmark {name} v{EDGE_VERSION} exists and is not the edge workload")
    if row.config != config:
        row.config = config
    return row


def _runs_here(ref: str) -> bool:
    try:
        return not is_remote(ref)
    except QuorumError:  # a scheme this server's plugins do not know: not schedulable
        return False


def _due(ctx: ServerContext, session: Session, bench: Benchmark, epoch: Epoch) -> list[int]:
    """The models that get an edge task in ``epoch``."""
    s = ctx.settings
    need = s.edge_prompt_tokens + s.edge_gen_tokens
    from quorumbench.services.scheduler import SCHEDULED  # scheduler imports this module

    models = session.execute(
        select(Model.id, Model.ref, Model.context_length).where(*SCHEDULED).order_by(Model.id)
    ).all()
    last: dict[int, int] = {
        model_id: newest
        for model_id, newest in session.execute(
            select(Task.model_id, func.max(Task.epoch_id))
            .where(Task.purpose == TASK_EDGE, Task.benchmark_id == bench.id)
            .group_by(Task.model_id)
        ).all()
    }
    return [
        m.id
        for m in models
        if _runs_here(m.ref)
        and (m.context_length is None or m.context_length >= need)
        and (m.id not in last or epoch.id - last[m.id] >= s.edge_every_epochs)
    ]


def _close_open(ctx: ServerContext, session: Session, model_id: int, keep: int) -> list[int]:
    """Close the model's open edge tasks but ``keep`` (its new one; see the module
    docstring); their ids."""
    now = ctx.now()
    closed = []
    open_tasks = session.scalars(
        select(Task.id).where(
            Task.model_id == model_id,
            Task.purpose == TASK_EDGE,
            Task.finalized_at.is_(None),
            Task.id != keep,
        )
    ).all()
    for task_id in open_tasks:
        reports = session.scalar(
            select(func.count()).where(EdgeResult.task_id == task_id, EdgeResult.counted)
        )
        status = TaskStatus.DONE if reports else TaskStatus.DISPUTED
        session.execute(
            update(Task)
            .where(Task.id == task_id, Task.finalized_at.is_(None))
            .values(status=status, finalized_at=now, open_slots=0)
        )
        if reports:
            log_edge_task(ctx, session.connection(), task_id, now)
        closed.append(task_id)
    return closed


def schedule_edge(ctx: ServerContext, epoch: Epoch) -> int:
    """Make ``epoch``'s edge tasks (idempotent across replicas); how many this call made."""
    s = ctx.settings
    if not s.edge_every_epochs:
        return 0
    created: list[int] = []
    with ctx.db.write() as session:
        bench = edge_benchmark(ctx, session, workload(ctx))
        for model_id in _due(ctx, session, bench, epoch):
            new_id = session.execute(
                ctx.db.insert(Task)
                .values(
                    model_id=model_id,
                    benchmark_id=bench.id,
                    epoch_id=epoch.id,
                    n_samples=0,
                    status=TaskStatus.PENDING,
                    round=1,
                    quorum=s.edge_runners,
                    open_slots=s.edge_runners,
                    attempts=0,
                    sample_ids=[],
                    priority=EDGE_PRIORITY,
                    created_at=ctx.now(),
                    purpose=TASK_EDGE,
                )
                .on_conflict_do_nothing(
                    index_elements=["model_id", "benchmark_id", "epoch_id"],
                    # literal SQL: PostgreSQL matches a partial index by its text
                    index_where=text(f"purpose = '{TASK_EDGE}'"),
                )
                .returning(Task.id)
            ).scalar()
            if new_id is None:  # another replica made it first
                continue
            closed = _close_open(ctx, session, model_id, new_id)
            created.append(new_id)
            event(log, "edge.scheduled", task=new_id, model=model_id, closed=closed)
    if created:
        ctx.queue.publish(created)
    return len(created)
