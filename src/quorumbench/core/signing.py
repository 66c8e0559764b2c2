"""What a runner signs for a result (Ed25519 over canonical JSON).

The message binds the result to everything it claims to be about: the task, the
lease and its attempt (the fencing token), the model at its pinned ref, the
benchmark version and its data, the result's own digest (``result_sha256``) and
the time it was signed. A signature therefore cannot be moved onto another task,
lease or revision, and the server refuses one signed outside the lease's lifetime.

The result's digest is the SHA-256 of the canonical JSON of
``ResultPayload.model_dump(mode="json")`` (``protocol.py``): the runner hashes the
payload it sends, the server the payload it parsed, ``quorumbench verify`` the payload
rebuilt from a log entry, all with :func:`result_digest`.
"""

from __future__ import annotations

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.protocol import EdgeReport, ResultPayload, Task

RESULT_SIGNATURE_CONTEXT = "quorumbench-result/v1"


def result_message(
    *,
    task_id: int,
    lease_id: int,
    attempt: int,
    model_ref: str,
    benchmark: str,
    benchmark_version: int,
    dataset_sha256: str,
    result_sha256: str,
    signed_at: str,
) -> bytes:
    """The canonical bytes a runner signs for one result."""
    return canonical_json(
        {
            "context": RESULT_SIGNATURE_CONTEXT,
            "task_id": task_id,
            "lease_id": lease_id,
            "attempt": attempt,
            "model_ref": model_ref,
            "benchmark": benchmark,
            "benchmark_version": benchmark_version,
            "dataset_sha256": dataset_sha256,
            "result_sha256": result_sha256,
            "signed_at": signed_at,
        }
    )


def message_for_task(
    task: Task, lease_id: int, attempt: int, result_sha256: str, signed_at: str
) -> bytes:
    """:func:`result_message` for a result of ``task`` (as its lease granted it)."""
    return result_message(
        task_id=task.id,
        lease_id=lease_id,
        attempt=attempt,
        model_ref=task.model.ref,
        benchmark=task.benchmark.name,
        benchmark_version=task.benchmark.version,
        dataset_sha256=task.benchmark.dataset_sha256,
        result_sha256=result_sha256,
        signed_at=signed_at,
    )


def result_digest(payload: ResultPayload | EdgeReport) -> str:
    """SHA-256 of the canonical JSON of ``payload.model_dump(mode="json")`` (a scored
    result, or an edge task's report: signed the same way).

    Fields added after protocol 1.0 are left out when absent (``protocol.added_field``),
    so a result signed before a field existed keeps its digest.
    """
    return sha256_hex(canonical_json(payload.model_dump(mode="json")))
