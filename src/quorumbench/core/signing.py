"""What a runner signs for a result (Ed25519 over canonical JSON).

The message binds the result to everything it claims to be about: the task, the
lease and its attempt (the fencing token), the model at its pinned ref, the
benchmark version and its data, the result's own digest (``payload_sha256``) and
the time it was signed. A signature therefore cannot be moved onto another task,
lease or revision, and the server refuses one signed outside the lease's lifetime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.core.canonical import canonical_json, sha256_hex

RESULT_SIGNATURE_CONTEXT = "quorumbench-result/v1"
PREDICTION_FIELDS = ("sample_predictions", "predictions_sha256")
"""Result fields added after the first signed results (migration 0010): part of the
digest when present, left out of it when absent or null, so results signed before
them still verify."""


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
    task: Mapping[str, Any], lease_id: int, attempt: int, result_sha256: str, signed_at: str
) -> bytes:
    """:func:`result_message` from a task as the server hands it out (the lease's ``task``)."""
    bench = task["benchmark"]
    return result_message(
        task_id=int(task["id"]),
        lease_id=lease_id,
        attempt=attempt,
        model_ref=str(task["model"]["ref"]),
        benchmark=str(bench["name"]),
        benchmark_version=int(bench["version"]),
        dataset_sha256=str(bench["dataset_sha256"]),
        result_sha256=result_sha256,
        signed_at=signed_at,
    )


def result_digest(result: Mapping[str, Any]) -> str:
    """SHA-256 of a result's canonical JSON, its numbers typed as the server reads them.

    The server parses a submission (``services.results.ResultPayload``) and hashes what
    it parsed; a runner hashes what it sends. Typing the fields the same way here (a
    score of ``1`` is ``1.0``, absent optional fields get their defaults) makes the
    two agree byte for byte. The :data:`PREDICTION_FIELDS` are hashed only when they
    are there (not null), so a result signed without them keeps its digest.
    """
    normal = {k: v for k, v in result.items() if not (k in PREDICTION_FIELDS and v is None)}
    normal["task_id"] = int(normal["task_id"])
    normal["n"] = int(normal["n"])
    normal["score"] = float(normal["score"])
    normal["runtime_s"] = float(normal["runtime_s"])
    normal["sample_scores"] = [float(x) for x in normal["sample_scores"]]
    normal.setdefault("hardware", {})
    normal.setdefault("model_revision", None)
    return sha256_hex(canonical_json(normal))
