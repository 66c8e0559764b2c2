"""Accepting a runner's edge report, closing an edge task, logging it.

``submit_edge`` mirrors ``services/results.submit_result`` for edge tasks
(``services/edge_tasks.py``), in one write transaction: check the lease (fencing),
the report against the task's workload (``core/edge.py``: its figures must follow
from its runs) and its signature, store it, and once ``quorum`` runners of distinct
accounts have reported, make the task DONE and append it to the public log. There is
no consensus: figures from different machines are not expected to agree; they are
hardware data shown per hardware class with their spread (``services/edge_board.py``),
never a score, never in reputation.

A repeated submission of the same report under the same lease returns the stored
answer; a different one under a lease that already submitted is a conflict. A
suspended runner's late report is kept for the record, not counted (its slot
reopens), as for results; so is a report on a task closed while its lease ran: the
log recorded the task without it, so counting it would show figures nobody can verify.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, func, insert, select, update

from quorumbench.core.edge import report_problems
from quorumbench.core.efficiency import hardware_class
from quorumbench.core.signing import result_digest
from quorumbench.db.edge_models import EdgeResult
from quorumbench.db.models import (
    TASK_EDGE,
    Benchmark,
    Lease,
    LeaseState,
    Model,
    RunnerKey,
    Task,
)
from quorumbench.errors import (
    ConflictError,
    InvalidSubmissionError,
)
from quorumbench.logs import event
from quorumbench.protocol import EdgeReport, ResultSignature, TaskStatus
from quorumbench.queue.base import Claimant
from quorumbench.services import publiclog
from quorumbench.services.context import ServerContext
from quorumbench.services.results import _LEASE, SubmitOutcome, check_active, check_fencing
from quorumbench.services.runner_keys import check_signature

log = logging.getLogger("quorumbench.results")

_EDGE_LEASE = _LEASE.add_columns(Benchmark.config.label("benchmark_config"))
_EDGE_LEASE_LOCKED = _EDGE_LEASE.with_for_update(of=(Lease.__table__, Task.__table__))
_SUBMITTED = (
    update(Lease)
    .where(Lease.id == bindparam("lease_id", type_=Integer))
    .values(state=LeaseState.SUBMITTED, ended_at=bindparam("now"))
)
_TASK = update(Task).where(Task.id == bindparam("task_id_", type_=Integer))
_COUNTED = select(func.count()).where(
    EdgeResult.task_id == bindparam("task_id", type_=Integer), EdgeResult.counted
)


def submit_edge(
    ctx: ServerContext,
    claimant: Claimant,
    lease_id: int,
    attempt: int,
    report: EdgeReport,
    signature: ResultSignature | None = None,
) -> SubmitOutcome:
    """Store an edge report under an active lease; see the module docstring.

    ``signature`` is checked before anything is stored; the HTTP API requires one.
    """
    now = ctx.now()
    digest = result_digest(report)
    finalized = False
    republish = False
    with ctx.db.write_connection() as conn:
        postgres = ctx.db.dialect == "postgresql"
        query = _EDGE_LEASE_LOCKED if postgres else _EDGE_LEASE
        found = conn.execute(query, {"lease_id": lease_id}).first()
        lease = check_fencing(found, claimant, lease_id, attempt)
        if lease.purpose != TASK_EDGE:
            raise InvalidSubmissionError(
                f"lease {lease_id} is for a scored task: submit its result to "
                f"POST /v0/leases/{lease_id}/result"
            )
        if lease.state == LeaseState.SUBMITTED:
            return _repeat(conn, lease, digest)
        check_active(lease, now, "report")
        problems = report_problems(
            report, lease.task_id, lease.benchmark_version, lease.benchmark_config
        )
        if problems:
            raise InvalidSubmissionError("; ".join(problems))
        if signature is not None:
            check_signature(ctx, conn, lease, digest, signature, now)
        open_task = lease.finalized_at is None
        # Only an open task's reports count: one closed while this lease ran (its
        # model's next edge task closed it) was logged without this report.
        counted = open_task and not lease.suspended
        machine = report.hardware.hardware
        result_id = conn.execute(
            insert(EdgeResult).returning(EdgeResult.id),
            {
                "task_id": lease.task_id,
                "lease_id": lease.id,
                "runner_id": lease.runner_id,
                "account_id": lease.account_id,
                "hardware_class": hardware_class(
                    {} if machine is None else machine.model_dump(mode="json")
                ),
                "report": report.model_dump(mode="json"),
                "payload_sha256": digest,
                "counted": counted,
                "submitted_at": now,
                "key_id": signature.key_id if signature else None,
                "signed_at": signature.signed_at if signature else None,
                "signature": signature.value if signature else None,
                "round": lease.round,
            },
        ).scalar_one()
        conn.execute(_SUBMITTED, {"lease_id": lease.id, "now": now})
        status = lease.status
        if open_task and not counted:  # a suspended runner's: its slot reopens
            conn.execute(_TASK.values(open_slots=Task.open_slots + 1), {"task_id_": lease.task_id})
            republish = True
        elif counted and conn.execute(_COUNTED, {"task_id": lease.task_id}).scalar_one() >= (
            lease.quorum
        ):
            conn.execute(
                _TASK.values(status=TaskStatus.DONE, finalized_at=now, open_slots=0),
                {"task_id_": lease.task_id},
            )
            log_edge_task(ctx, conn, lease.task_id, now)
            status, finalized = TaskStatus.DONE, True
    if finalized:
        event(log, "edge.finalized", task=lease.task_id, reports=lease.quorum)
    if republish:
        ctx.queue.publish([lease.task_id])
    return SubmitOutcome(result_id, lease.task_id, status, lease.task_round, False)


_RESULT_OF_LEASE = select(EdgeResult.id, EdgeResult.payload_sha256).where(
    EdgeResult.lease_id == bindparam("lease_id", type_=Integer)
)


def _repeat(conn: Connection, lease: Any, digest: str) -> SubmitOutcome:
    result = conn.execute(_RESULT_OF_LEASE, {"lease_id": lease.id}).one()
    if result.payload_sha256 != digest:
        raise ConflictError(
            f"lease {lease.id} already submitted a different report (id {result.id})"
        )
    return SubmitOutcome(result.id, lease.task_id, lease.status, lease.task_round, True)


# --- the public log ----------------------------------------------------------------

_EDGE_TASK = (
    select(
        Task.id,
        Task.epoch_id,
        Task.quorum,
        Task.status,
        Model.id.label("model_id"),
        Model.ref,
        Benchmark.name,
        Benchmark.version,
        Benchmark.dataset_sha256,
        Benchmark.config,
    )
    .join(Model, Model.id == Task.model_id)
    .join(Benchmark, Benchmark.id == Task.benchmark_id)
    .where(Task.id == bindparam("task_id", type_=Integer))
)
_EDGE_REPORTS = (
    select(
        EdgeResult.id,
        EdgeResult.runner_id,
        EdgeResult.account_id,
        EdgeResult.hardware_class,
        EdgeResult.report,
        EdgeResult.payload_sha256,
        EdgeResult.counted,
        EdgeResult.submitted_at,
        EdgeResult.lease_id,
        Lease.attempt,
        EdgeResult.key_id,
        RunnerKey.public_key,
        EdgeResult.signed_at,
        EdgeResult.signature,
    )
    .join(Lease, Lease.id == EdgeResult.lease_id)
    .outerjoin(RunnerKey, RunnerKey.key_id == EdgeResult.key_id)
    .where(EdgeResult.task_id == bindparam("task_id", type_=Integer))
    .order_by(EdgeResult.id)
)


def edge_entry(conn: Connection, task_id: int, now: datetime) -> dict[str, Any]:
    """The public log's record of a closed edge task: the task, its workload, and every
    report as signed, with what anyone needs to check each signature."""
    task = conn.execute(_EDGE_TASK, {"task_id": task_id}).one()
    reports = conn.execute(_EDGE_REPORTS, {"task_id": task_id}).all()
    return {
        "edge": {
            "task": {
                "id": task.id,
                "epoch": task.epoch_id,
                "model": {"id": task.model_id, "ref": task.ref},
                "benchmark": {
                    "name": task.name,
                    "version": task.version,
                    "dataset_sha256": task.dataset_sha256,
                    "config": task.config,
                },
                "quorum": task.quorum,
                "status": str(task.status),
                "closed_at": now.isoformat(),
            },
            "reports": [
                {
                    "id": r.id,
                    "runner_id": r.runner_id,
                    "account_id": r.account_id,
                    "hardware_class": r.hardware_class,
                    "counted": r.counted,
                    "submitted_at": r.submitted_at.isoformat(),
                    "report": r.report,
                    "payload_sha256": r.payload_sha256,
                    "lease_id": r.lease_id,
                    "attempt": r.attempt,
                    "signature": None
                    if r.signature is None
                    else {
                        "key_id": r.key_id,
                        "public_key": r.public_key,
                        "signed_at": r.signed_at,
                        "value": r.signature,
                    },
                }
                for r in reports
            ],
        }
    }


def log_edge_task(ctx: ServerContext, conn: Connection, task_id: int, now: datetime) -> int:
    """Append a closed edge task to the public log (caller's transaction); its index."""
    return publiclog.append(ctx, conn, task_id, edge_entry(conn, task_id, now), now)
