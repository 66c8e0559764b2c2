"""What a runner signs: the result digest, with and without the prediction fields."""

from __future__ import annotations

from quorumbench.core.canonical import canonical_json, predictions_digest, sha256_hex
from quorumbench.core.signing import (
    PREDICTION_FIELDS,
    message_for_task,
    result_digest,
    result_message,
)

OLD = {
    "task_id": 7,
    "sample_ids": ["a", "b"],
    "score": 0.5,
    "n": 2,
    "sample_scores": [1.0, 0.0],
    "sample_output_hashes": ["0" * 64, "1" * 64],
    "outputs_sha256": "a" * 64,
    "runtime_s": 1.0,
    "hardware": {},
    "model_revision": None,
}
"""A result as runners submitted it before results carried their predictions."""
NEW = {**OLD, "sample_predictions": [0, None], "predictions_sha256": predictions_digest([0, None])}


def test_numbers_are_typed_as_the_server_reads_them():
    sent = {**OLD, "task_id": "7", "n": "2", "score": 1 / 2, "sample_scores": [1, 0]}
    del sent["hardware"], sent["model_revision"]
    assert result_digest(sent) == result_digest(OLD) == sha256_hex(canonical_json(OLD))


def test_a_result_without_predictions_keeps_the_digest_it_was_signed_with():
    nulls = {**OLD, **dict.fromkeys(PREDICTION_FIELDS)}
    assert result_digest(nulls) == result_digest(OLD) == sha256_hex(canonical_json(OLD))


def test_predictions_are_part_of_the_digest_when_present():
    assert result_digest(NEW) == sha256_hex(canonical_json(NEW))
    assert result_digest(NEW) != result_digest(OLD)
    other = {**NEW, "sample_predictions": [1, None]}
    assert result_digest(other) != result_digest(NEW)
    other = {**NEW, "predictions_sha256": "f" * 64}
    assert result_digest(other) != result_digest(NEW)


def test_the_message_for_a_served_task_is_the_result_message():
    task = {
        "id": 7,
        "model": {"ref": "hf:o/m@" + "0" * 40},
        "benchmark": {"name": "arith", "version": 1, "dataset_sha256": "d" * 64},
    }
    digest = result_digest(NEW)
    assert message_for_task(task, 3, 1, digest, "t") == result_message(
        task_id=7,
        lease_id=3,
        attempt=1,
        model_ref="hf:o/m@" + "0" * 40,
        benchmark="arith",
        benchmark_version=1,
        dataset_sha256="d" * 64,
        result_sha256=digest,
        signed_at="t",
    )
