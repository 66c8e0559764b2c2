"""Accepting a runner's result and reaching consensus.

``submit_result`` runs in one write transaction: check the lease (fencing), store
the result, then compare all results of the task. A repeated submission of the same
payload under the same lease returns the stored answer (idempotent); a different
payload under a lease that already submitted is a conflict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.consensus import Verdict, Vote, quorum_verdict
from quorumbench.core.leaderboard import Accumulator, interval
from quorumbench.db.models import (
    ConsensusOutcome,
    LeaderboardEntry,
    Lease,
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
from quorumbench.queue.base import Claimant
from quorumbench.services.context import ServerContext
from quorumbench.services.leaderboard import refresh_aggregate


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

    def digest(self) -> str:
        return sha256_hex(canonical_json(self.model_dump(mode="json")))


@dataclass(frozen=True)
class SubmitOutcome:
    result_id: int
    task_id: int
    task_status: str
    round: int
    duplicate: bool


def _validate(payload: ResultPayload, task: Task) -> None:
    problems = []
    if payload.task_id != task.id:
        problems.append(f"task_id {payload.task_id} is not this lease's task {task.id}")
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
    if problems:
        raise InvalidSubmissionError("; ".join(problems))


def submit_result(
    ctx: ServerContext, claimant: Claimant, lease_id: int, attempt: int, payload: ResultPayload
) -> SubmitOutcome:
    """Store a result under an active lease and update consensus; see module docstring."""
    now = ctx.now()
    digest = payload.digest()
    republish: list[int] = []
    with ctx.db.write() as session:
        query = select(Lease).where(Lease.id == lease_id)
        if ctx.db.dialect == "postgresql":
            query = query.with_for_update()
        lease = session.scalars(query).first()
        if lease is None or lease.account_id != claimant.account_id:
            raise NotFoundError(f"no lease {lease_id} for this account")
        if lease.attempt != attempt:
            raise LeaseExpiredError(f"lease {lease_id} is attempt {lease.attempt}, not {attempt}")
        if lease.state == "SUBMITTED":
            return _repeat(session, lease, digest)
        if lease.state != "ACTIVE" or lease.expires_at <= now:
            state = "expired" if lease.state == "ACTIVE" else lease.state.lower()
            raise LeaseExpiredError(f"lease {lease_id} is {state}; the result was not counted")
        task_query = select(Task).where(Task.id == lease.task_id)
        if ctx.db.dialect == "postgresql":
            task_query = task_query.with_for_update()
        task = session.scalars(task_query).one()
        _validate(payload, task)
        result = Result(
            task_id=task.id,
            lease_id=lease.id,
            runner_id=lease.runner_id,
            account_id=lease.account_id,
            round=lease.round,
            score=payload.score,
            n=payload.n,
            outputs_sha256=payload.outputs_sha256,
            sample_scores=payload.sample_scores,
            sample_output_hashes=payload.sample_output_hashes,
            runtime_s=payload.runtime_s,
            hardware=payload.hardware,
            payload_sha256=digest,
            counted=True,
            outlier=False,
            submitted_at=now,
        )
        session.add(result)
        lease.state, lease.ended_at = "SUBMITTED", now
        session.flush()
        if task.finalized_at is None:
            republish = _decide(ctx, session, task, result)
        outcome = SubmitOutcome(result.id, task.id, task.status, task.round, False)
    if republish:
        ctx.queue.publish(republish)
    return outcome


def _repeat(session: Session, lease: Lease, digest: str) -> SubmitOutcome:
    result = session.scalars(select(Result).where(Result.lease_id == lease.id)).one()
    if result.payload_sha256 != digest:
        raise ConflictError(
            f"lease {lease.id} already submitted a different result (id {result.id})"
        )
    task = session.get_one(Task, lease.task_id)
    return SubmitOutcome(result.id, task.id, task.status, task.round, True)


def _decide(ctx: ServerContext, session: Session, task: Task, result: Result) -> list[int]:
    """Apply the consensus rule after a new result; task ids to republish."""
    settings = ctx.settings
    if session.get_one(Runner, result.runner_id).suspended:
        # A suspended runner's late result is kept for the record but not counted.
        result.counted = False
        task.open_slots += 1
        return [task.id]
    counted = list(
        session.scalars(
            select(Result).where(Result.task_id == task.id, Result.counted).order_by(Result.id)
        )
    )
    votes = [Vote(r.id, r.score, tuple(float(x) for x in r.sample_scores)) for r in counted]
    verdict = quorum_verdict(
        votes,
        quorum=task.quorum,
        min_agree=settings.quorum,
        threshold=settings.agreement_threshold,
    )
    if verdict.status == "PENDING":
        return []
    _record_outcome(ctx, session, task, verdict)
    if verdict.status == "DONE":
        task.status, task.score, task.finalized_at = "DONE", verdict.score, ctx.now()
        _update_reputation(ctx, session, counted, verdict)
        _update_leaderboard(ctx, session, task, verdict)
        return []
    task.status = "DISPUTED"
    if task.round >= settings.max_rounds:
        task.finalized_at = ctx.now()
        return []
    task.round += 1
    task.quorum += settings.quorum_step
    task.open_slots += settings.quorum_step
    return [task.id]


def _record_outcome(ctx: ServerContext, session: Session, task: Task, verdict: Verdict) -> None:
    session.add(
        ConsensusOutcome(
            task_id=task.id,
            round=task.round,
            status=verdict.status,
            score=verdict.score,
            spread=verdict.spread,
            agreeing=list(verdict.agreeing),
            outliers=list(verdict.outliers),
            sample_consensus=list(verdict.sample_consensus),
            sample_agreement=list(verdict.sample_agreement),
            decided_at=ctx.now(),
        )
    )


def _update_reputation(
    ctx: ServerContext, session: Session, counted: list[Result], verdict: Verdict
) -> None:
    """Count agreements and outliers per runner with atomic increments.

    Runners are updated in id order, so two tasks finalizing at once on PostgreSQL
    take the row locks in the same order and cannot deadlock, and ``x = x + 1`` in
    SQL never loses a concurrent increment.
    """
    outliers = set(verdict.outliers)
    deltas: dict[int, tuple[int, int]] = {}
    for result in counted:
        agree, out = deltas.get(result.runner_id, (0, 0))
        if result.id in outliers:
            result.outlier = True
            out += 1
        else:
            agree += 1
        deltas[result.runner_id] = (agree, out)
    for runner_id in sorted(deltas):
        agree, out = deltas[runner_id]
        session.execute(
            update(Runner)
            .where(Runner.id == runner_id)
            .values(agreements=Runner.agreements + agree, outliers=Runner.outliers + out)
        )
        if out:
            suspended = session.execute(
                update(Runner)
                .where(
                    Runner.id == runner_id,
                    Runner.outliers >= ctx.settings.outlier_limit,
                    Runner.outliers > Runner.agreements,
                    Runner.suspended.is_(False),
                )
                .values(suspended=True)
            )
            if suspended.rowcount:  # type: ignore[attr-defined]
                ctx.identities.clear()  # it may no longer pull: forget its cached id


def _update_leaderboard(ctx: ServerContext, session: Session, task: Task, verdict: Verdict) -> None:
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
        "updated_at": ctx.now(),
    }
    entry = ctx.db.locked_row(session, LeaderboardEntry, key, empty)
    before = Accumulator(
        entry.n_tasks, entry.n_samples, entry.weighted_sum, entry.sample_sum, entry.sample_sumsq
    )
    after = before.add_task(verdict.score, samples)
    stats = interval(after)
    values = {
        "n_tasks": after.n_tasks,
        "n_samples": after.n_samples,
        "weighted_sum": after.weighted_sum,
        "sample_sum": after.sample_sum,
        "sample_sumsq": after.sample_sumsq,
        "score": stats.score,
        "stderr": stats.stderr,
        "ci_low": stats.ci_low,
        "ci_high": stats.ci_high,
        "updated_at": ctx.now(),
    }
    session.execute(
        update(LeaderboardEntry)
        .where(
            LeaderboardEntry.model_id == task.model_id,
            LeaderboardEntry.benchmark_id == task.benchmark_id,
        )
        .values(**values)
    )
    session.flush()
    # Then the model's aggregate over benchmarks, in this transaction: it locks the
    # aggregate row after the per-benchmark row above (the one lock order everywhere).
    refresh_aggregate(ctx, session, task.model_id)
