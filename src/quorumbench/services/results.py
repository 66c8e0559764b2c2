"""Accepting a runner's result and reaching consensus.

``submit_result`` runs in one write transaction on a plain connection (Core
statements, built once: this is a hot path): check the lease (fencing), store the
result, then compare all counted results of the task. A repeated submission of the same
payload under the same lease returns the stored answer (idempotent); a different
payload under a lease that already submitted is a conflict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, func, insert, select, update

from quorumbench.core.canonical import predictions_digest
from quorumbench.core.consensus import Vote, quorum_verdict
from quorumbench.core.efficiency import hardware_class
from quorumbench.core.signing import result_digest
from quorumbench.db.models import (
    TASK_EDGE,
    Benchmark,
    Lease,
    LeaseState,
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
from quorumbench.protocol import LEGACY_ENGINES, ResultPayload, ResultSignature, TaskStatus
from quorumbench.queue.base import Claimant
from quorumbench.services.canaries import _canary_wanted, _finish_canary, _settle_as_canary
from quorumbench.services.context import ServerContext
from quorumbench.services.finalize import (
    _COUNTED,
    _TASK,
    _log_final,
    _publish_done,
    _record_outcome,
    _TaskState,
)
from quorumbench.services.runner_keys import check_signature


@dataclass(frozen=True)
class SubmitOutcome:
    result_id: int
    task_id: int
    task_status: TaskStatus
    round: int
    duplicate: bool


def _validate(payload: ResultPayload, task: Any) -> None:
    """Check ``payload`` against its task (a row of ``_LEASE`` columns)."""
    if task.purpose == TASK_EDGE:
        raise InvalidSubmissionError(
            f"lease {task.id} is for an edge task: send its report to "
            f"POST /v0/leases/{task.id}/edge (protocol 1.2)"
        )
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
    problems += _engine_problems(payload.engine, task.model_engine)
    if problems:
        raise InvalidSubmissionError("; ".join(problems))


def _engine_problems(engine: str | None, wanted: str | None) -> list[str]:
    """A result comes from the engine its task names (so results of two engines never
    meet in one consensus); a runner before 1.3 names none and used a legacy engine."""
    if wanted is None or engine == wanted or (engine is None and wanted in LEGACY_ENGINES):
        return []
    made_by = f"the {engine} engine" if engine else "a runner that names no engine (before 1.3)"
    return [f"the result comes from {made_by}; this task's model is evaluated by {wanted}"]


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
        Task.purpose,
        Runner.suspended,
        Model.ref.label("model_ref"),
        Model.engine.label("model_engine"),
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
    .values(state=LeaseState.SUBMITTED, ended_at=bindparam("now"))
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
    digest = result_digest(payload)
    with ctx.db.write_connection() as conn:
        sqlite = ctx.db.dialect == "sqlite"
        query = _LEASE_SQLITE if sqlite else _LEASE_LOCKED
        found = conn.execute(query, {"lease_id": lease_id}).first()
        lease = check_fencing(found, claimant, lease_id, attempt)
        if lease.state == LeaseState.SUBMITTED:
            return _repeat(conn, lease, digest)
        check_active(lease, now, "result")
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
                "hardware": payload.hardware.model_dump(mode="json"),
                "measurements": None
                if payload.measurements is None
                else payload.measurements.model_dump(mode="json"),
                "engine": payload.engine,
                "hardware_class": hardware_class(
                    {}
                    if payload.hardware.hardware is None
                    else payload.hardware.hardware.model_dump(mode="json")
                ),
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


def check_fencing(lease: Any, claimant: Claimant, lease_id: int, attempt: int) -> Any:
    """``lease`` (the row read for a submission); refuses a lease that is missing or not
    this account's (NotFoundError) or another attempt than the lease's
    (LeaseExpiredError: the fencing token)."""
    if lease is None or lease.account_id != claimant.account_id:
        raise NotFoundError(f"no lease {lease_id} for this account")
    if lease.attempt != attempt:
        raise LeaseExpiredError(f"lease {lease_id} is attempt {lease.attempt}, not {attempt}")
    return lease


def check_active(lease: Any, now: datetime, what: str) -> None:
    """Refuse a first submission under a lease that is no longer active."""
    if lease.state != LeaseState.ACTIVE or lease.expires_at <= now:
        state = "expired" if lease.state == LeaseState.ACTIVE else lease.state.lower()
        raise LeaseExpiredError(f"lease {lease.id} is {state}; the {what} was not counted")


_RESULT_OF_LEASE = select(Result.id, Result.payload_sha256).where(
    Result.lease_id == bindparam("lease_id", type_=Integer)
)
_REOPEN = _TASK.values(open_slots=Task.open_slots + 1)


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
    if verdict.status == TaskStatus.PENDING:
        return []
    now = ctx.now()
    if verdict.status == TaskStatus.DONE:
        if _canary_wanted(ctx, conn, lease, now):
            _settle_as_canary(ctx, conn, task, verdict, now)
            task.note("task.canary", round=task.round, score=verdict.score)
            return [task.id]
        _publish_done(ctx, conn, lease, task, counted, verdict, now)
        return []
    _record_outcome(conn, task, verdict, now)
    task.status = TaskStatus.DISPUTED
    if task.round >= settings.max_rounds:
        conn.execute(
            _TASK, {"task_id_": task.id, "status": TaskStatus.DISPUTED, "finalized_at": now}
        )
        _log_final(ctx, conn, task, verdict, now)
        task.note(
            "task.finalized", status=TaskStatus.DISPUTED, round=task.round, spread=verdict.spread
        )
        return []
    task.note("task.disputed", round=task.round, spread=verdict.spread, more=settings.quorum_step)
    task.round += 1
    task.quorum += settings.quorum_step
    conn.execute(
        _TASK.values(open_slots=Task.open_slots + settings.quorum_step),
        {
            "task_id_": task.id,
            "status": TaskStatus.DISPUTED,
            "round": task.round,
            "quorum": task.quorum,
        },
    )
    return [task.id]
