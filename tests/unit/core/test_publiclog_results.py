"""The per-result checks of ``quorumbench verify``: runner signatures and predictions
digests, for entries written before results carried predictions and after."""

from __future__ import annotations

import copy

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from quorumbench.core.canonical import predictions_digest, sha256_hex
from quorumbench.core.publiclog import (
    PAYLOAD_FIELDS,
    PREDICTION_FIELDS,
    Problem,
    check_result_predictions,
    check_result_signatures,
)
from quorumbench.core.signing import result_digest, result_message
from quorumbench.protocol import ResultPayload

RUNNER = Ed25519PrivateKey.generate()
PUBLIC = RUNNER.public_key().public_bytes_raw()
TASK = {
    "id": 5,
    "model": {"id": 1, "ref": "hf:o/m@" + "0" * 40},
    "benchmark": {"name": "truthfulqa-mc1", "version": 1, "dataset_sha256": "d" * 64},
    "n_samples": 3,
    "sample_ids": ["0001", "0002", "0003"],
}


def holds(message: bytes, signature_hex: str, public_hex: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex)).verify(
            bytes.fromhex(signature_hex), message
        )
    except InvalidSignature:
        return False
    return True


def signed_result(result_id: int, predictions: list | None) -> dict:
    """A logged result as the server writes it, signed over what the runner sent (an
    older runner sent no predictions, and its entry has none)."""
    sent = {
        "task_id": TASK["id"],
        "sample_ids": TASK["sample_ids"],
        "score": 1 / 3,
        "n": 3,
        "sample_scores": [1.0, 0.0, 0.0],
        "sample_output_hashes": ["0" * 64] * 3,
        "outputs_sha256": "a" * 64,
        "runtime_s": 2.0,
        "hardware": {},
        "model_revision": None,
    }
    if predictions is not None:
        sent["sample_predictions"] = predictions
        sent["predictions_sha256"] = predictions_digest(predictions)
    digest = result_digest(ResultPayload.model_validate(sent))
    message = result_message(
        task_id=TASK["id"],
        lease_id=100 + result_id,
        attempt=1,
        model_ref=TASK["model"]["ref"],
        benchmark=TASK["benchmark"]["name"],
        benchmark_version=1,
        dataset_sha256="d" * 64,
        result_sha256=digest,
        signed_at="2026-12-08T10:00:00+00:00",
    )
    logged = {k: v for k, v in sent.items() if k not in ("task_id", "sample_ids")}
    return {
        **logged,
        "id": result_id,
        "payload_sha256": digest,
        "lease_id": 100 + result_id,
        "attempt": 1,
        "signature": {
            "key_id": sha256_hex(PUBLIC),
            "public_key": PUBLIC.hex(),
            "signed_at": "2026-12-08T10:00:00+00:00",
            "value": RUNNER.sign(message).hex(),
        },
    }


@pytest.fixture
def entries() -> list[dict]:
    """One entry of a task finalized after the upgrade whose first result an older
    runner submitted before it, and one entry with predictions throughout."""
    mixed = {"task": TASK, "results": [signed_result(1, None), signed_result(2, [0, 2, None])]}
    new = {"task": TASK, "results": [signed_result(3, [0, 2, 1]), signed_result(4, [0, 2, 1])]}
    return [{"index": 0, "entry": mixed}, {"index": 1, "entry": new}]


def test_old_and_new_results_verify(entries):
    old = entries[0]["entry"]["results"][0]
    added = (*PREDICTION_FIELDS, "measurements", "engine")  # added after protocol 1.0
    assert all(name in old for name in PAYLOAD_FIELDS if name not in added)
    assert "sample_predictions" not in entries[0]["entry"]["results"][0]
    assert check_result_signatures(entries, holds) == ([], 0)
    assert check_result_predictions(entries) == ([], 1)


def test_a_doctored_prediction_is_reported_by_both_checks(entries):
    doctored = copy.deepcopy(entries)
    doctored[1]["entry"]["results"][1]["sample_predictions"][2] = 0
    problems, without = check_result_predictions(doctored)
    assert [str(p) for p in problems] == [
        "entry 1, result 4: its sample_predictions do not hash to its predictions_sha256"
    ]
    assert without == 1
    problems, _ = check_result_signatures(doctored, holds)
    assert [str(p) for p in problems] == [
        "entry 1, result 4: its fields do not hash to its payload_sha256"
    ]


def test_predictions_rehashed_after_signing_still_break_the_signature(entries):
    doctored = copy.deepcopy(entries)
    result = doctored[1]["entry"]["results"][0]
    result["sample_predictions"] = [1, 1, 1]
    result["predictions_sha256"] = predictions_digest([1, 1, 1])
    assert check_result_predictions(doctored) == ([], 1)
    problems, _ = check_result_signatures(doctored, holds)
    assert [p.where for p in problems] == ["entry 1, result 3"]


def test_predictions_added_to_an_old_result_break_its_signature(entries):
    doctored = copy.deepcopy(entries)
    result = doctored[0]["entry"]["results"][0]
    result["sample_predictions"] = [0, 0, 0]
    result["predictions_sha256"] = predictions_digest([0, 0, 0])
    problems, _ = check_result_signatures(doctored, holds)
    assert [p.where for p in problems] == ["entry 0, result 1"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r.pop("predictions_sha256"), "has sample_predictions alone"),
        (lambda r: r.pop("sample_predictions"), "has predictions_sha256 alone"),
        (lambda r: r["sample_predictions"].pop(), "does not have one prediction per sample"),
        (lambda r: r.update(sample_predictions="012"), "does not have one prediction per sample"),
    ],
)
def test_a_malformed_predictions_record_is_reported(entries, change, expected):
    doctored = copy.deepcopy(entries)
    change(doctored[1]["entry"]["results"][0])
    problems, _ = check_result_predictions(doctored)
    assert [str(p) for p in problems] == [f"entry 1, result 3: {expected}"]


def test_results_logged_without_a_signature_are_counted_not_reported(entries):
    doctored = copy.deepcopy(entries)
    for row, position in ((0, 0), (1, 1)):
        doctored[row]["entry"]["results"][position]["signature"] = None  # as the server logs it
    assert check_result_signatures(doctored, holds) == ([], 2)


OTHER_RUNNER = Ed25519PrivateKey.generate().public_key().public_bytes_raw()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda r: r["signature"].update(key_id="ab" * 32),
            "key id is not the hash of the public key",
            id="a key id that is not the hash of its key",
        ),
        pytest.param(
            lambda r: r.update(score=1.5),
            "its fields are not a result: score: Input should be less than or equal to 1",
            id="a score out of range",
        ),
        pytest.param(
            lambda r: r.update(hardware={"gpu": "H100"}),
            "its fields are not a result: hardware.gpu: Extra inputs are not permitted",
            id="a field the protocol does not have",
        ),
        pytest.param(
            lambda r: r["signature"].update(value="00" * 64),
            "the runner's signature does not verify",
            id="a zeroed signature",
        ),
        pytest.param(
            lambda r: r["signature"].update(
                public_key=OTHER_RUNNER.hex(), key_id=sha256_hex(OTHER_RUNNER)
            ),
            "the runner's signature does not verify",
            id="another runner's key",
        ),
        pytest.param(
            lambda r: r["signature"].update(signed_at="2026-12-09T10:00:00+00:00"),
            "the runner's signature does not verify",
            id="a signing time changed",
        ),
        pytest.param(
            lambda r: r.update(lease_id=r["lease_id"] + 1),
            "the runner's signature does not verify",
            id="another lease",
        ),
        pytest.param(
            lambda r: r.update(attempt=2),
            "the runner's signature does not verify",
            id="another attempt",
        ),
    ],
)
def test_a_doctored_signed_result_is_reported_and_the_others_still_verify(
    entries, change, expected
):
    doctored = copy.deepcopy(entries)
    change(doctored[1]["entry"]["results"][0])
    assert check_result_signatures(doctored, holds) == ([Problem("entry 1, result 3", expected)], 0)
