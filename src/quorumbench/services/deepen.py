"""Deepening a plan's thin slice: extra verified tasks for public models.

An answer from the cache (``services/ask_cache.py``) may be thin for a model: fewer
verified samples in the plan's slice than the plan's budget. A signed-in person may
then ask to deepen it (:func:`request`): for each thin public model of the plan, tasks
on exactly the plan's labelled samples (``evaluation/slices.py``: the slice in the
plan seed's draw order) that the model has no verified result for and no open task
on, up to the budget. They go through the normal queue and consensus: runners lease
them like any task, three must agree, a dispute re-queues them.

Their samples are chosen by label, not drawn by an epoch's seed, so a deepen task
(``Task.purpose = 'deepen'``) never enters a leaderboard row, an aggregate, the
model page's history or subject table, or the scheduler's depth logic: it is verified
(consensus, runner reputation, the public log, marked as a deepen task) and counts in
the answers to plans, never on the public board.

Caps (settings): ``deepen_max_models`` models and ``deepen_max_tasks`` tasks per
request, ``deepen_max_open`` plans with unfinished deepen tasks per account. Deepen
tasks are leased after every epoch task (their priority is above the epoch's task
budget). A request is idempotent: samples already open are not scheduled again, and
each task's (plan, model, benchmark, part) is unique.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from sqlalchemy import exists, func, or_, select, text
from sqlalchemy.orm import Session

from quorumbench.core.plans import Plan
from quorumbench.db.models import TASK_DEEPEN, Lease, LeaseState, Model, Task
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.errors import NotFoundError, QuorumError, RateLimitedError
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.evaluation.slices import SliceWalk
from quorumbench.protocol import TaskStatus
from quorumbench.services.benchmarks import loaded
from quorumbench.services.board import model_type
from quorumbench.services.context import ServerContext
from quorumbench.services.scheduler import ensure_epoch

STATES = ("pending", "leased", "disputed", "done", "unresolved")
"""Where a deepen task stands (:func:`progress`): open and waiting, open and leased,
open again after a dispute, verified, or final without agreement."""
_KINDS = {"hf": "base", "lora": "lora", "gguf": "gguf", "openai": "endpoint"}
"""A plan's model kinds (``core/plans.py``) as the board names them."""

SampleKey = tuple[str, str]
"""(benchmark name, sample id)."""


@dataclass
class _Slice:
    """The plan's samples on this server, in draw order (built as far as they are
    read), and their benchmarks' rows."""

    walk: SliceWalk
    rows: dict[str, BenchmarkRow]
    skipped: list[dict[str, str]] = field(default_factory=list)


def plan_seed(plan: Plan) -> str:
    """The seed of the plan's draw: its ``versions.seed``, else its public id."""
    seed = plan.versions.get("seed")
    return seed if isinstance(seed, str) and seed else plan.public().id


def _slice(ctx: ServerContext, session: Session, plan: Plan) -> _Slice:
    """The plan's labelled samples in the active benchmarks this server can load."""
    rows: dict[str, BenchmarkRow] = {}
    skipped: list[dict[str, str]] = []
    benches: dict[str, Benchmark] = {}
    pinned = plan.versions.get("benchmarks", {})
    for row in session.scalars(select(BenchmarkRow).where(BenchmarkRow.active)):
        if not plan.covers_benchmark(row.name, row.pillar):
            continue
        if pinned.get(row.name, row.version) != row.version:
            skipped.append(
                {
                    "benchmark": row.name,
                    "reason": f"the plan was made with version {pinned[row.name]}; "
                    f"this server runs version {row.version}",
                }
            )
            continue
        try:
            benches[row.name] = loaded(ctx, row.name, row.version)
        except QuorumError as exc:
            skipped.append({"benchmark": row.name, "reason": f"its data: {exc}"[:300]})
            continue
        rows[row.name] = row
    pillars = {name: row.pillar for name, row in rows.items()}
    return _Slice(SliceWalk(plan, benches, pillars, plan_seed(plan)), rows, skipped)


def _picked(walk: SliceWalk, leave_out: set[SampleKey], n: int) -> list[SampleKey]:
    """The first ``n`` samples of the slice, in draw order, not in ``leave_out``."""
    keys = ((s.benchmark.name, s.sample.id) for s in walk)
    return list(islice((key for key in keys if key not in leave_out), max(0, n)))


def plan_models(session: Session, plan: Plan) -> list[Model]:
    """The public models the plan names (active, not retired), by id."""
    query = select(Model).where(Model.active, Model.retired_at.is_(None)).order_by(Model.id)
    chosen = plan.models
    if chosen.select == "named":
        query = query.where(or_(Model.name.in_(chosen.names), Model.ref.in_(chosen.names)))
    if chosen.select == "filter":
        if chosen.min_params is not None:
            query = query.where(Model.params >= chosen.min_params)
        if chosen.max_params is not None:
            query = query.where(Model.params <= chosen.max_params)
    models = list(session.scalars(query))
    if chosen.select == "filter" and chosen.kinds:
        kinds = {_KINDS[k] for k in chosen.kinds}
        models = [m for m in models if model_type(m.ref, m.details) in kinds]
    return models


def _evidence(
    session: Session, model_id: int, rows: Mapping[str, BenchmarkRow]
) -> tuple[set[SampleKey], set[SampleKey]]:
    """The model's samples with a verified result (DONE tasks of any purpose) and those
    in its open tasks, in the slice's benchmarks."""
    # Two requests (of different plans) for one model take turns here, so neither
    # schedules samples the other has just made open (SQLite: one writer at a time).
    session.execute(select(Model.id).where(Model.id == model_id).with_for_update())
    names = {row.id: name for name, row in rows.items()}
    done: set[SampleKey] = set()
    open_: set[SampleKey] = set()
    for bench_id, ids, status, finalized in session.execute(
        select(Task.benchmark_id, Task.sample_ids, Task.status, Task.finalized_at).where(
            Task.model_id == model_id,
            Task.benchmark_id.in_(list(names)),
            or_(Task.status == TaskStatus.DONE, Task.finalized_at.is_(None)),
        )
    ):
        into = done if status == TaskStatus.DONE else open_ if finalized is None else None
        if into is not None:
            into.update((names[bench_id], sample_id) for sample_id in ids)
    return done, open_


def _check_open_requests(session: Session, ctx: ServerContext, owner_id: int, plan_id: str) -> None:
    """Refuse a new plan when the account has ``deepen_max_open`` unfinished ones."""
    cap = ctx.settings.deepen_max_open
    plans = set(
        session.scalars(
            select(Task.plan_id)
            .where(
                Task.purpose == TASK_DEEPEN,
                Task.requested_by == owner_id,
                Task.finalized_at.is_(None),
            )
            .distinct()
        )
    )
    if plan_id not in plans and len(plans) >= cap:
        raise RateLimitedError(
            f"this account has unfinished deepen tasks for {len(plans)} plans (at most "
            f"{cap} at once); ask again when one has finished"
        )


def request(ctx: ServerContext, plan: Plan, owner_id: int) -> Mapping[str, Any]:
    """Schedule extra tasks on exactly the plan's labelled samples for the plan's thin
    public models (through the runner queue and consensus); what was scheduled.

    Returns ``plan_id`` (the public plan's, for :func:`progress`), ``scheduled`` (per
    model: ``have`` verified and ``in_flight`` samples of its slice, the ``budget``,
    and per benchmark the new task ids and samples), ``skipped`` (models and why),
    ``benchmarks_skipped``, ``not_considered`` (models past the per-request cap) and
    the totals ``tasks`` and ``samples``. Raises :class:`NotFoundError` when the plan
    selects no sample here, :class:`RateLimitedError` past the account's open plans.
    """
    settings = ctx.settings
    plan_id = plan.public().id
    epoch = ensure_epoch(ctx, ctx.now())
    created: list[int] = []
    scheduled: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    not_considered = 0
    with ctx.db.write() as session:
        found = _slice(ctx, session, plan)
        walk = found.walk
        if not walk.first(1):
            raise NotFoundError(
                "the plan's labels select no sample of this server's active benchmarks: "
                "there is nothing to deepen"
            )
        _check_open_requests(session, ctx, owner_id, plan_id)
        room = settings.deepen_max_tasks
        models = plan_models(session, plan)
        known = {m.name for m in models} | {m.ref for m in models}
        for name in plan.models.names if plan.models.select == "named" else ():
            if name not in known:
                skipped.append(
                    {"model_id": None, "model": name, "ref": None, "reason": "no such public model"}
                )
        for model in models:
            if len(scheduled) >= settings.deepen_max_models or room <= 0:
                not_considered += 1
                continue
            if model.paused_at is not None:
                skipped.append(_skip(model, "paused: its tasks kept failing"))
                continue
            done, open_ = _evidence(session, model.id, found.rows)
            have = sum(1 for key in done if key in walk)
            in_flight = sum(1 for key in open_ - done if key in walk)
            missing = plan.budget - have - in_flight
            if missing <= 0:
                why = f"its slice has {have} verified samples and {in_flight} being evaluated"
                skipped.append(_skip(model, f"{why}; the plan's budget is {plan.budget}"))
                continue
            picked = _picked(walk, done | open_, missing)
            if not picked:
                skipped.append(_skip(model, "every sample of its slice is evaluated already"))
                continue
            parts, room = _schedule(
                ctx, session, (plan_id, owner_id, epoch.id), model, found, picked, room
            )
            if not parts["tasks"]:  # another request made these very parts just now
                skipped.append(_skip(model, "a request of this plan scheduled it just now"))
                continue
            created += [t for b in parts["benchmarks"] for t in b["tasks"]]
            entry = {k: v for k, v in _skip(model, None).items() if k != "reason"}
            scheduled.append(
                {**entry, "have": have, "in_flight": in_flight, "budget": plan.budget, **parts}
            )
    if created:
        ctx.queue.publish(created)
    return {
        "plan_id": plan_id,
        "epoch": epoch.id,
        "scheduled": scheduled,
        "skipped": skipped,
        "benchmarks_skipped": found.skipped,
        "not_considered": not_considered,
        "tasks": len(created),
        "samples": sum(e["samples"] for e in scheduled),
    }


def _skip(model: Model, reason: str | None) -> dict[str, Any]:
    return {"model_id": model.id, "model": model.name, "ref": model.ref, "reason": reason}


def _schedule(
    ctx: ServerContext,
    session: Session,
    request_of: tuple[str, int, int],
    model: Model,
    found: _Slice,
    picked: list[SampleKey],
    room: int,
) -> tuple[dict[str, Any], int]:
    """Insert the model's tasks over ``picked`` (per benchmark, in draw order, in tasks
    of its ``samples_per_task``), at most ``room``; what was made and the room left.

    ``request_of`` is (plan id, account id, current epoch id)."""
    plan_id, owner_id, epoch_id = request_of
    by_bench: dict[str, list[str]] = {}
    for name, sample_id in picked:
        by_bench.setdefault(name, []).append(sample_id)
    quorum = ctx.settings.quorum
    out: list[dict[str, Any]] = []
    samples = 0
    for name, ids in by_bench.items():
        row = found.rows[name]
        size = max(1, row.samples_per_task)
        first = session.scalar(
            select(func.coalesce(func.max(Task.part), -1)).where(
                Task.purpose == TASK_DEEPEN,
                Task.plan_id == plan_id,
                Task.model_id == model.id,
                Task.benchmark_id == row.id,
            )
        )
        tasks: list[int] = []
        made = 0
        for offset, start in enumerate(range(0, len(ids), size)):
            if room <= 0:
                break
            chunk = ids[start : start + size]
            new_id = session.execute(
                ctx.db.insert(Task)
                .values(
                    model_id=model.id,
                    benchmark_id=row.id,
                    epoch_id=epoch_id,
                    n_samples=len(chunk),
                    status=TaskStatus.PENDING,
                    round=1,
                    quorum=quorum,
                    open_slots=quorum,
                    attempts=0,
                    sample_ids=chunk,
                    # after every epoch task (an epoch's priorities stay below its budget)
                    priority=ctx.settings.epoch_task_budget,
                    created_at=ctx.now(),
                    purpose=TASK_DEEPEN,
                    plan_id=plan_id,
                    part=int(first if first is not None else -1) + 1 + offset,
                    requested_by=owner_id,
                )
                .on_conflict_do_nothing(
                    index_elements=["plan_id", "model_id", "benchmark_id", "part"],
                    index_where=text(f"purpose = '{TASK_DEEPEN}'"),
                )
                .returning(Task.id)
            ).scalar()
            room -= 1
            if new_id is not None:
                tasks.append(new_id)
                made += len(chunk)
        if tasks:
            out.append({"benchmark": name, "tasks": tasks, "samples": made})
            samples += made
    return {"benchmarks": out, "tasks": sum(len(b["tasks"]) for b in out), "samples": samples}, room


def progress(ctx: ServerContext, plan_id: str) -> Mapping[str, Any]:
    """How far the plan's deepening tasks are (scheduled, done, disputed, pending).

    ``plan_id`` is the public plan's id (what :func:`request` returns). Returns the
    counts of :data:`STATES` over all its tasks (``tasks``, ``samples``,
    ``samples_done``, ``finished`` when none is open) and the same per model.
    """
    leased = exists().where(Lease.task_id == Task.id, Lease.state == LeaseState.ACTIVE)
    with ctx.db.read() as session:
        rows = session.execute(
            select(
                Task.model_id,
                Model.name,
                Task.status,
                Task.finalized_at.is_not(None),
                leased,
                Task.n_samples,
            )
            .join(Model, Model.id == Task.model_id)
            .where(Task.purpose == TASK_DEEPEN, Task.plan_id == plan_id)
            .order_by(Task.model_id, Task.id)
        ).all()
    total = _counts()
    models: dict[int, dict[str, Any]] = {}
    for model_id, name, status, final, busy, n in rows:
        state = _state(status, final, busy)
        per = models.setdefault(model_id, {"model_id": model_id, "model": name, **_counts()})
        for counts in (total, per):
            counts[state] += 1
            counts["tasks"] += 1
            counts["samples"] += n
            counts["samples_done"] += n if state == "done" else 0
    for counts in (total, *models.values()):
        counts["finished"] = counts["tasks"] > 0 and not any(
            counts[s] for s in ("pending", "leased", "disputed")
        )
    return {"plan_id": plan_id, **total, "models": list(models.values())}


def _counts() -> dict[str, Any]:
    return {**dict.fromkeys(STATES, 0), "tasks": 0, "samples": 0, "samples_done": 0}


def _state(status: TaskStatus, final: bool, leased: bool) -> str:
    if status == TaskStatus.DONE:
        return "done"
    if final:
        return "unresolved"
    if leased:
        return "leased"
    return "disputed" if status == TaskStatus.DISPUTED else "pending"
