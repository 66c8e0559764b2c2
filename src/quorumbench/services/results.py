"""Accepting a runner's result and reaching consensus.

``submit_result`` runs in one write transaction on a plain connection (Core
statements, built once: this is a hot path): check the lease (fencing), store the
result, then compare all counted results of the task. A repeated submission of the same
payload under the same lease returns the stored answer (idempotent); a different
payload under a lease that already submitted is a conflict.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from sqlalchemy import Connection, Integer, bindparam, exists, func, insert, select, update

from quorumbench.core.canonical import predictions_digest
from quorumbench.core.consensus import (
    Verdict,
    Vote,
    canary_passes,
    quorum_verdict,
    verdict_from_dict,
)
from quorumbench.core.leaderboard import Accumulator
from quorumbench.core.signing import result_digest
from quorumbench.db.models import (
    Benchmark,
    ConsensusOutcome,
    LeaderboardEntry,
    Lease,
    Model,
    Result,
    Runner,
    Task,
)
from quorumbench.errors import (
    ConflictError,
    InvalidSubmissionError,
    LeaseExpiredError,
    NotFoundError,
)
from quorumbench.logs import event
from quorumbench.queue.base import Claimant
from quorumbench.services import publiclog
from quorumbench.services.context import ServerContext
from quorumbench.services.leaderboard import entry_values, refresh_aggregate
from quorumbench.services.runner_keys import ResultSignature, check_signature

log = logging.getLogger("quorumbench.results")


class ResultPayload(BaseModel):
    """What a runner submits for one lease."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: int
    score: float = Field(ge=0, le=1)
    n: int = Field(ge=1)
    sample_ids: list[str]
    sample_scores: list[float]
    sample_output_hashes: list[str]
    outputs_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    runtime_s: float = Field(ge=0)
    hardware: dict[str, Any] = Field(default_factory=dict)
    model_revision: str | None = None
    sample_predictions: list[StrictInt | StrictStr | None] | None = None
    """The canonical prediction per sample (``evaluation/predictions.py``). Optional in
    the schema only so that an older runner's result gets :func:`_validate`'s message
    naming the upgrade: a result without it is refused."""
    predictions_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    def digest(self) -> str:
        return result_digest(self.model_dump(mode="json"))


@dataclass(frozen=True)
class SubmitOutcome:
    result_id: int
    task_id: int
    task_status: str
    round: int
    duplicate: bool


def _validate(payload: ResultPayload, task: Any) -> None:
    """Check ``payload`` against its task (a row of ``_LEASE`` columns)."""
    problems = []
    if payload.task_id != task.task_id:
        problems.append(f"task_id {payload.task_id} is not this lease's task {task.task_id}")
    if payload.n != task.n_samples:
        problems.append(f"n is {payload.n}, the task has {task.n_samples} samples")
    if payload.sample_ids != task.sample_ids:
        problems.append("sample_ids differ from the task's samples")
    if len(payload.sample_scores) != payload.n or len(payload.sample_output_hashes) != payload.n:
        problems.append("sample_scores and sample_output_hashes need one entry per sample")
    elif any(not 0 <= s <= 1 or math.isnan(s) for s in payload.sample_scores):
        problems.append("sample scores must lie in [0, 1]")
    elif abs(sum(payload.sample_scores) / payload.n - payload.score) > 1e-6:
        problems.append("score is not the mean of sample_scores")
    problems += _prediction_problems(payload)
    if problems:
        raise InvalidSubmissionError("; ".join(problems))


def _prediction_problems(payload: ResultPayload) -> list[str]:
    predictions, digest = payload.sample_predictions, payload.predictions_sha256
    if (predictions is None) != (digest is None):
        missing = "sample_predictions" if predictions is None else "predictions_sha256"
        return [f"{missing} is missing (sample_predictions and predictions_sha256 go together)"]
    if predictions is None or digest is None:
        return [
            "the result has no sample_predictions and predictions_sha256: the runner is "
            "older than this server, which requires them; upgrade quorumbench on the runner "
            "(pip install -U quorumbench)"
        ]
    if len(predictions) != payload.n:
        return [f"sample_predictions has {len(predictions)} entries, the result has n={payload.n}"]
    if predictions_digest(predictions) != digest:
        return ["predictions_sha256 is not the SHA-256 of the canonical JSON of sample_predictions"]
    return []


_LEASE = (
    select(
        Lease.id,
        Lease.task_id,
        Lease.runner_id,
        Lease.account_id,
        Lease.attempt,
        Lease.round,
        Lease.state,
        Lease.expires_at,
        Lease.leased_at,
        Task.n_samples,
        Task.sample_ids,
        Task.status,
        Task.round.label("task_round"),
        Task.quorum,
        Task.model_id,
        Task.benchmark_id,
        Task.finalized_at,
        Task.canary,
        Runner.suspended,
        Model.ref.label("model_ref"),
        Benchmark.name.label("benchmark_name"),
        Benchmark.version.label("benchmark_version"),
        Benchmark.dataset_sha256,
    )
    .join(Task, Task.id == Lease.task_id)
    .join(Runner, Runner.id == Lease.runner_id)
    .join(Model, Model.id == Task.model_id)
    .join(Benchmark, Benchmark.id == Task.benchmark_id)
    .where(Lease.id == bindparam("lease_id", type_=Integer))
)
"""A lease with what a submission needs of its task and runner (one statement)."""

_LEASE_SQLITE = _LEASE.add_columns(
    select(func.count())
    .where(Result.task_id == Lease.task_id, Result.counted)
    .scalar_subquery()
    .label("n_counted")
)
"""On SQLite also the task's counted results: the write transaction holds the whole
database, so the count is current and a submission below the quorum needs no further
read. (On PostgreSQL a count read with the row lock could miss a result committed
while this statement waited for the lock; ``_decide`` reads them afresh.)"""

_LEASE_LOCKED = _LEASE.with_for_update(of=(Lease.__table__, Task.__table__))
_INSERT_RESULT = insert(Result).returning(Result.id)
_SUBMITTED = (
    update(Lease)
    .where(Lease.id == bindparam("lease_id", type_=Integer))
    .values(state="SUBMITTED", ended_at=bindparam("now"))
)
_COUNTED = (
    select(Result.id, Result.runner_id, Result.score, Result.sample_scores)
    .where(Result.task_id == bindparam("task_id", type_=Integer), Result.counted)
    .order_by(Result.id)
)


def submit_result(
    ctx: ServerContext,
    claimant: Claimant,
    lease_id: int,
    attempt: int,
    payload: ResultPayload,
    signature: ResultSignature | None = None,
) -> SubmitOutcome:
    """Store a result under an active lease and update consensus; see module docstring.

    ``signature`` is checked (services/runner_keys.py) before anything is stored; the
    HTTP API requires one. In-process callers (tests, tools) may leave it out, and the
    result is then stored unsigned.
    """
    now = ctx.now()
    digest = payload.digest()
    with ctx.db.write_connection() as conn:
        sqlite = ctx.db.dialect == "sqlite"
        query = _LEASE_SQLITE if sqlite else _LEASE_LOCKED
        lease = conn.execute(query, {"lease_id": lease_id}).first()
        if lease is None or lease.account_id != claimant.account_id:
            raise NotFoundError(f"no lease {lease_id} for this account")
        if lease.attempt != attempt:
            raise LeaseExpiredError(f"lease {lease_id} is attempt {lease.attempt}, not {attempt}")
        if lease.state == "SUBMITTED":
            return _repeat(conn, lease, digest)
        if lease.state != "ACTIVE" or lease.expires_at <= now:
            state = "expired" if lease.state == "ACTIVE" else lease.state.lower()
            raise LeaseExpiredError(f"lease {lease_id} is {state}; the result was not counted")
        _validate(payload, lease)
        if signature is not None:
            check_signature(ctx, conn, lease, digest, signature, now)
        open_task = lease.finalized_at is None
        canary = open_task and lease.canary is not None
        # A suspended runner's late result is kept for the record but not counted, and
        # a canary result is checked against the settled answer, never voted with it.
        counted = not (lease.suspended and open_task) and not canary
        result_id = conn.execute(
            _INSERT_RESULT,
            {
                "task_id": lease.task_id,
                "lease_id": lease.id,
                "runner_id": lease.runner_id,
                "account_id": lease.account_id,
                "round": lease.round,
                "score": payload.score,
                "n": payload.n,
                "outputs_sha256": payload.outputs_sha256,
                "sample_scores": payload.sample_scores,
                "sample_output_hashes": payload.sample_output_hashes,
                "predictions_sha256": payload.predictions_sha256,
                "sample_predictions": payload.sample_predictions,
                "runtime_s": payload.runtime_s,
                "hardware": payload.hardware,
                "payload_sha256": digest,
                "counted": counted,
                "outlier": False,
                "submitted_at": now,
                "model_revision": payload.model_revision,
                "key_id": signature.key_id if signature else None,
                "signed_at": signature.signed_at if signature else None,
                "signature": signature.value if signature else None,
            },
        ).scalar_one()
        conn.execute(_SUBMITTED, {"lease_id": lease.id, "now": now})
        state = _TaskState(lease.task_id, lease.status, lease.task_round, lease.quorum)
        republish: list[int] = []
        if canary:
            state.status = _finish_canary(ctx, conn, lease, state, result_id, payload)
        elif not counted:
            conn.execute(_REOPEN, {"task_id_": state.id})
            republish = [state.id]
        elif open_task and not (sqlite and lease.n_counted + 1 < state.quorum):
            republish = _decide(ctx, conn, lease, state)
    state.log()
    if republish:
        ctx.queue.publish(republish)
    return SubmitOutcome(result_id, state.id, state.status, state.round, False)


@dataclass
class _TaskState:
    """The task's status and round as the submission leaves them."""

    id: int
    status: str
    round: int
    quorum: int
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """What the decision did, logged once its transaction has committed."""

    def note(self, name: str, **fields: Any) -> None:
        self.events.append((name, {"task": self.id, **fields}))

    def log(self) -> None:
        for name, fields in self.events:
            event(log, name, **fields)


_RESULT_OF_LEASE = select(Result.id, Result.payload_sha256).where(
    Result.lease_id == bindparam("lease_id", type_=Integer)
)
_TASK = update(Task).where(Task.id == bindparam("task_id_", type_=Integer))
"""Set the task's columns named in the parameters (``task_id_`` picks the task)."""
_REOPEN = _TASK.values(open_slots=Task.open_slots + 1)
_ENTRY = update(LeaderboardEntry).where(
    LeaderboardEntry.model_id == bindparam("model_id_", type_=Integer),
    LeaderboardEntry.benchmark_id == bindparam("benchmark_id_", type_=Integer),
)
_RECORD = insert(ConsensusOutcome)
_OUTLIERS = (
    update(Result).where(Result.id.in_(bindparam("ids", expanding=True))).values(outlier=True)
)
_TALLY = (
    update(Runner)
    .where(Runner.id == bindparam("runner_id_", type_=Integer))
    .values(
        agreements=Runner.agreements + bindparam("agree", type_=Integer),
        outliers=Runner.outliers + bindparam("out", type_=Integer),
    )
)
_SUSPEND = (
    update(Runner)
    .where(
        Runner.id == bindparam("runner_id_", type_=Integer),
        Runner.outliers >= bindparam("limit", type_=Integer),
        Runner.outliers > Runner.agreements,
        Runner.suspended.is_(False),
    )
    .values(suspended=True)
)


def _repeat(conn: Connection, lease: Any, digest: str) -> SubmitOutcome:
    result = conn.execute(_RESULT_OF_LEASE, {"lease_id": lease.id}).one()
    if result.payload_sha256 != digest:
        raise ConflictError(
            f"lease {lease.id} already submitted a different result (id {result.id})"
        )
    return SubmitOutcome(result.id, lease.task_id, lease.status, lease.task_round, True)


def _decide(ctx: ServerContext, conn: Connection, lease: Any, task: _TaskState) -> list[int]:
    """Apply the consensus rule after a new counted result; task ids to republish."""
    settings = ctx.settings
    counted = conn.execute(_COUNTED, {"task_id": task.id}).all()
    votes = [Vote(r.id, r.score, tuple(float(x) for x in r.sample_scores)) for r in counted]
    verdict = quorum_verdict(
        votes,
        quorum=task.quorum,
        min_agree=settings.quorum,
        threshold=settings.agreement_threshold,
        tolerance=settings.sample_tolerance,
    )
    if verdict.status == "PENDING":
        return []
    now = ctx.now()
    if verdict.status == "DONE":
        if _canary_wanted(ctx, conn, lease, now):
            _settle_as_canary(ctx, conn, task, verdict, now)
            task.note("task.canary", round=task.round, score=verdict.score)
            return [task.id]
        _publish_done(ctx, conn, lease, task, counted, verdict, now)
        return []
    _record_outcome(conn, task, verdict, now)
    task.status = "DISPUTED"
    if task.round >= settings.max_rounds:
        conn.execute(_TASK, {"task_id_": task.id, "status": "DISPUTED", "finalized_at": now})
        _log_final(ctx, conn, task, verdict, now)
        task.note("task.finalized", status="DISPUTED", round=task.round, spread=verdict.spread)
        return []
    task.note("task.disputed", round=task.round, spread=verdict.spread, more=settings.quorum_step)
    task.round += 1
    task.quorum += settings.quorum_step
    conn.execute(
        _TASK.values(open_slots=Task.open_slots + settings.quorum_step),
        {"task_id_": task.id, "status": "DISPUTED", "round": task.round, "quorum": task.quorum},
    )
    return [task.id]


def _log_final(
    ctx: ServerContext, conn: Connection, task: _TaskState, verdict: Verdict, now: datetime
) -> None:
    """Append a task that reached its final status to the public log."""
    entry = publiclog.log_entry(conn, task.id, task.round, verdict, now)
    publiclog.append(ctx, conn, task.id, entry, now)


def _publish_done(
    ctx: ServerContext,
    conn: Connection,
    task_row: Any,
    task: _TaskState,
    counted: Sequence[Any],
    verdict: Verdict,
    now: datetime,
) -> None:
    """Make a DONE verdict public: outcome, reputation, leaderboard and log."""
    _record_outcome(conn, task, verdict, now)
    task.status = "DONE"
    conn.execute(
        _TASK,
        {"task_id_": task.id, "status": "DONE", "score": verdict.score, "finalized_at": now},
    )
    _update_reputation(ctx, conn, counted, verdict)
    _update_leaderboard(ctx, conn, task_row, verdict, now)
    _log_final(ctx, conn, task, verdict, now)
    task.note("task.finalized", status="DONE", round=task.round, score=verdict.score)


# --- canaries ----------------------------------------------------------------------
#
# A canary is a spot check: a task that has just reached consensus is, now and then,
# kept open for one more runner instead of being published. To that runner it is an
# ordinary open task of the current epoch (same payload, same public view: open
# tasks show no results and no result count); its result is compared with the
# settled answer, and a wrong one costs reputation. Then the task is published with
# the consensus it had reached (the canary result is stored and logged, never voted).
# A settled task that no runner takes within ``canary_window_s`` is published anyway.

_OTHER_RUNNER = (
    select(Runner.id)
    .where(
        Runner.suspended.is_(False),
        Runner.last_seen_at >= bindparam("since"),
        Runner.account_id != bindparam("owner_id", type_=Integer),
        ~exists().where(
            Lease.task_id == bindparam("task_id", type_=Integer),
            Lease.account_id == Runner.account_id,
        ),
    )
    .limit(1)
)
"""A runner seen lately that could take the canary slot (not the owner's, no lease on it)."""


_CHANCE = random.SystemRandom()
"""Which settled tasks become canaries must not be predictable from outside."""


def _canary_wanted(ctx: ServerContext, conn: Connection, task_row: Any, now: datetime) -> bool:
    rate = ctx.settings.canary_rate
    if rate <= 0 or _CHANCE.random() >= rate:
        return False
    owner = conn.execute(select(Model.owner_id).where(Model.id == task_row.model_id)).scalar()
    since = now - timedelta(seconds=ctx.settings.canary_window_s)
    params = {"since": since, "owner_id": owner, "task_id": task_row.task_id}
    return conn.execute(_OTHER_RUNNER, params).first() is not None


def _settle_as_canary(
    ctx: ServerContext, conn: Connection, task: _TaskState, verdict: Verdict, now: datetime
) -> None:
    deadline = now + timedelta(seconds=ctx.settings.canary_window_s)
    canary = {
        "verdict": verdict.as_dict(),
        "settled_at": now.isoformat(),
        "deadline": deadline.isoformat(),
        "threshold": ctx.settings.agreement_threshold,
        "checks": [],
    }
    conn.execute(_TASK, {"task_id_": task.id, "canary": canary, "open_slots": 1})


def _finish_canary(
    ctx: ServerContext,
    conn: Connection,
    lease: Any,
    task: _TaskState,
    result_id: int,
    payload: ResultPayload,
) -> str:
    """Check a canary result against the settled verdict, then publish the task.

    The rule is the one the verdict was reached with (its ``tolerance`` and
    ``epsilon``; a canary settled before the per-sample rule is checked on scores)."""
    canary = dict(lease.canary)
    verdict = verdict_from_dict(canary["verdict"])
    counted = conn.execute(_COUNTED, {"task_id": task.id}).all()
    inside = set(verdict.agreeing)
    agreeing = [r.score for r in counted if r.id in inside]
    passed = canary_passes(
        agreeing,
        payload.score,
        canary["threshold"],
        sample_scores=payload.sample_scores,
        sample_consensus=verdict.sample_consensus,
        tolerance=verdict.tolerance,
        epsilon=verdict.epsilon,
    )
    if not passed:
        conn.execute(_OUTLIERS, {"ids": [result_id]})
    _tally(ctx, conn, {lease.runner_id: (1, 0) if passed else (0, 1)})
    task.note("canary.checked", result=result_id, passed=passed)
    checks = [*canary["checks"], {"result_id": result_id, "passed": passed}]
    conn.execute(_TASK, {"task_id_": task.id, "canary": {**canary, "checks": checks}})
    _publish_done(ctx, conn, lease, task, counted, verdict, ctx.now())
    return task.status


def publish_overdue_canaries(ctx: ServerContext, now: datetime) -> int:
    """Publish settled tasks whose canary window is over and that nobody is running."""
    with ctx.db.read() as session:
        waiting = session.execute(
            # An open task is PENDING or DISPUTED (ix_tasks_status_id): this runs every
            # tick, so it reads the open tasks, never the finished history.
            select(Task.id, Task.canary).where(
                Task.status.in_(("PENDING", "DISPUTED")),
                Task.finalized_at.is_(None),
                Task.canary.is_not(None),
            )
        ).all()
    due = [t.id for t in waiting if datetime.fromisoformat(t.canary["deadline"]) <= now]
    published = 0
    for task_id in due:
        state = None
        with ctx.db.write_connection() as conn:
            query = _LEASE_TASK
            if ctx.db.dialect != "sqlite":
                query = query.with_for_update()
            row = conn.execute(query, {"task_id": task_id}).first()
            if row is None or row.finalized_at is not None:
                continue
            busy = conn.execute(
                select(Lease.id).where(Lease.task_id == task_id, Lease.state == "ACTIVE").limit(1)
            ).first()
            if busy is not None:
                continue  # its submission (or its expiry, next time) settles it
            conn.execute(_TASK, {"task_id_": task_id, "open_slots": 0})
            state = _TaskState(task_id, row.status, row.round, row.quorum)
            counted = conn.execute(_COUNTED, {"task_id": task_id}).all()
            verdict = verdict_from_dict(row.canary["verdict"])
            _publish_done(ctx, conn, row, state, counted, verdict, now)
            state.note("canary.unclaimed")
            published += 1
        if state is not None:
            state.log()
    return published


_LEASE_TASK = select(
    Task.id.label("task_id"),
    Task.status,
    Task.round,
    Task.quorum,
    Task.model_id,
    Task.benchmark_id,
    Task.n_samples,
    Task.finalized_at,
    Task.canary,
).where(Task.id == bindparam("task_id", type_=Integer))
"""A task with the columns ``_publish_done`` reads (shaped like a ``_LEASE`` row)."""


_RULE_FIELDS = ("tolerance", "epsilon")
"""Verdict fields the public log carries but ``consensus_outcomes`` does not store."""


def _record_outcome(conn: Connection, task: _TaskState, verdict: Verdict, now: datetime) -> None:
    fields = {k: v for k, v in verdict.as_dict().items() if k not in _RULE_FIELDS}
    conn.execute(_RECORD, {"task_id": task.id, "round": task.round, **fields, "decided_at": now})


def _update_reputation(
    ctx: ServerContext, conn: Connection, counted: Sequence[Any], verdict: Verdict
) -> None:
    """Count agreements and outliers per runner with atomic increments.

    Runners are updated in id order, so two tasks finalizing at once on PostgreSQL
    take the row locks in the same order and cannot deadlock, and ``x = x + 1`` in
    SQL never loses a concurrent increment.
    """
    outliers = set(verdict.outliers)
    if outliers:
        conn.execute(_OUTLIERS, {"ids": sorted(outliers)})
    deltas: dict[int, tuple[int, int]] = {}
    for result in counted:
        agree, out = deltas.get(result.runner_id, (0, 0))
        if result.id in outliers:
            out += 1
        else:
            agree += 1
        deltas[result.runner_id] = (agree, out)
    _tally(ctx, conn, deltas)


def _tally(ctx: ServerContext, conn: Connection, deltas: dict[int, tuple[int, int]]) -> None:
    """Add (agreements, outliers) per runner id; suspend runners over the limit."""
    tallies = [
        {"runner_id_": runner_id, "agree": agree, "out": out}
        for runner_id, (agree, out) in sorted(deltas.items())
    ]
    conn.execute(_TALLY, tallies)
    limit = ctx.settings.outlier_limit
    for tally in tallies:
        if tally["out"]:
            suspended = conn.execute(_SUSPEND, {"runner_id_": tally["runner_id_"], "limit": limit})
            if suspended.rowcount:
                ctx.identities.clear()  # it may no longer pull: forget its cached id


def _update_leaderboard(
    ctx: ServerContext, conn: Connection, task: Any, verdict: Verdict, now: datetime
) -> None:
    """Add a DONE task to its (model, benchmark) row, then the model's aggregate."""
    assert verdict.score is not None
    samples = list(verdict.sample_consensus) or [verdict.score] * task.n_samples
    key = {"model_id": task.model_id, "benchmark_id": task.benchmark_id}
    # Two tasks of one (model, benchmark) finalizing at once serialize on this row.
    empty = {
        "n_tasks": 0,
        "n_samples": 0,
        "weighted_sum": 0.0,
        "sample_sum": 0.0,
        "sample_sumsq": 0.0,
        "score": 0.0,
        "stderr": 0.0,
        "ci_low": 0.0,
        "ci_high": 0.0,
        "updated_at": now,
    }
    entry = ctx.db.locked_row(conn, LeaderboardEntry, key, empty)
    before = Accumulator(
        entry.n_tasks, entry.n_samples, entry.weighted_sum, entry.sample_sum, entry.sample_sumsq
    )
    values = entry_values(before.add_task(verdict.score, samples), now)
    conn.execute(_ENTRY, {"model_id_": task.model_id, "benchmark_id_": task.benchmark_id, **values})
    # Then the model's aggregate over benchmarks, in this transaction: it locks the
    # aggregate row after the per-benchmark row above (the one lock order everywhere).
    refresh_aggregate(ctx, conn, task.model_id)
