"""What a runner signs: the result digest, with and without the prediction fields."""

from __future__ import annotations

from quorumbench.core.canonical import canonical_json, predictions_digest, sha256_hex
from quorumbench.core.signing import message_for_task, result_digest, result_message
from quorumbench.protocol import ResultPayload, Task

PREDICTION_FIELDS = ("sample_predictions", "predictions_sha256")

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


def digest(fields: dict) -> str:
    """The digest of a result as the server parses it."""
    return result_digest(ResultPayload.model_validate(fields))


def test_numbers_are_typed_as_the_server_reads_them():
    sent = {**OLD, "task_id": "7", "n": "2", "score": 1 / 2, "sample_scores": [1, 0]}
    del sent["hardware"], sent["model_revision"]
    assert digest(sent) == digest(OLD) == sha256_hex(canonical_json(OLD))


def test_a_result_without_predictions_keeps_the_digest_it_was_signed_with():
    """The bytes runners signed before predictions existed, byte for byte."""
    nulls = {**OLD, **dict.fromkeys(PREDICTION_FIELDS)}
    assert digest(nulls) == digest(OLD) == sha256_hex(canonical_json(OLD))


def test_a_runners_hardware_is_signed_as_it_sent_it():
    """Absent fields stay absent and a null stays null: the bytes the runner hashed."""
    hardware = {
        "hardware": {"os": "Linux 6", "machine": "x86_64", "cpu_count": None},
        "libraries": {"python": "3.11.7", "torch": "2.13.0"},
        "batch_size": 8,
        "device": "cpu",
    }
    sent = {**OLD, "hardware": hardware}
    assert digest(sent) == sha256_hex(canonical_json(sent))
    assert ResultPayload.model_validate(sent).model_dump(mode="json")["hardware"] == hardware


def test_predictions_are_part_of_the_digest_when_present():
    assert digest(NEW) == sha256_hex(canonical_json(NEW))
    assert digest(NEW) != digest(OLD)
    other = {**NEW, "sample_predictions": [1, None]}
    assert digest(other) != digest(NEW)
    other = {**NEW, "predictions_sha256": "f" * 64}
    assert digest(other) != digest(NEW)


def test_the_message_for_a_served_task_is_the_result_message():
    task = Task.model_validate(
        {
            "id": 7,
            "epoch": 1,
            "round": 1,
            "model": {"id": 1, "ref": "hf:o/m@" + "0" * 40},
            "benchmark": {
                "name": "arith",
                "version": 1,
                "prompt_version": 1,
                "dataset_sha256": "d" * 64,
                "config": {},
            },
            "n_samples": 2,
            "seed_commitment": "c" * 64,
            "sample_ids": ["a", "b"],
        }
    )
    digest = result_digest(ResultPayload.model_validate(NEW))
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
