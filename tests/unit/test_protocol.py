"""The wire protocol: versions, what is signed, and how fields may be added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pydantic import ValidationError

from quorumbench import protocol
from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.errors import UnsupportedProtocolError
from quorumbench.evaluation.environment import hardware, library_versions
from quorumbench.protocol import (
    Hardware,
    LeaseGrant,
    ResultPayload,
    Submission,
    Task,
    added_field,
    check_version,
)
from quorumbench.runner.keys import new_key

TASK = {
    "id": 7,
    "epoch": 3,
    "round": 1,
    "model": {"id": 1, "ref": "hf:o/m@" + "0" * 40, "revision": "0" * 40},
    "benchmark": {
        "name": "arith",
        "version": 1,
        "prompt_version": 1,
        "dataset_sha256": "d" * 64,
        "config": {"shots": 0, "max_new_tokens": 32},
    },
    "n_samples": 2,
    "seed_commitment": "c" * 64,
    "sample_ids": ["a", "b"],
}
RESULT = {
    "task_id": 7,
    "score": 0.5,
    "n": 2,
    "sample_ids": ["a", "b"],
    "sample_scores": [1.0, 0.0],
    "sample_output_hashes": ["0" * 64, "1" * 64],
    "outputs_sha256": "a" * 64,
    "runtime_s": 1.5,
    "hardware": {"device": "cpu", "batch_size": 8},
    "model_revision": "0" * 40,
    "sample_predictions": ["4", None],
    "predictions_sha256": "b" * 64,
}


# -- versions ------------------------------------------------------------------------


def test_this_version_is_accepted():
    check_version(protocol.PROTOCOL_VERSION)
    check_version("1.0")


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0.9", "upgrade quorumbench on the runner (pip install -U quorumbench)"),
        ("2.0", "the runner is newer than this server"),
        ("1.5", "the runner is newer than this server"),
    ],
)
def test_a_version_outside_the_accepted_range_is_refused_with_what_to_do(version, says):
    with pytest.raises(UnsupportedProtocolError) as caught:
        check_version(version)
    error = caught.value
    assert error.code == "unsupported-protocol"
    assert (error.version, error.accepted) == (version, "1.0 to 1.4")
    assert f"accepts runner protocol 1.0 to 1.4; this runner speaks {version}" in error.message
    assert says in error.message


def test_the_accepted_range_is_stated_per_major(monkeypatch):
    monkeypatch.setattr(protocol, "PROTOCOL_VERSION", "2.3")
    monkeypatch.setattr(protocol, "ACCEPTED_MAJORS", frozenset({1, 2}))
    assert protocol.accepted_versions() == "1.0, 2.0 to 2.3"
    check_version("1.0")
    check_version("2.3")
    with pytest.raises(UnsupportedProtocolError, match="speaks 2.4"):
        check_version("2.4")


def test_a_version_must_be_major_dot_minor():
    for bad in ("1", "1.0.0", "v1.0", "", "1.x"):
        with pytest.raises(ValidationError):
            protocol.LeaseRequest(protocol_version=bad)


def test_runners_from_before_versions_speak_1_0():
    assert protocol.LeaseRequest.model_validate({}).protocol_version == "1.0"
    body = {"attempt": 1, "result": RESULT, "signature": a_signature()}
    assert Submission.model_validate(body).protocol_version == "1.0"


def a_signature() -> dict:
    return {"key_id": "e" * 64, "signed_at": "2026-01-01T00:00:00+00:00", "value": "f" * 128}


# -- who may add fields ----------------------------------------------------------------


def test_what_the_server_sends_may_grow_an_older_runner_ignores_new_fields():
    grant = {
        "lease_id": 3,
        "attempt": 1,
        "expires_at": "2030-01-01T00:00:00+00:00",
        "task": {**TASK, "priority": 5, "model": {**TASK["model"], "family": "llama"}},
        "server_hint": "new in 1.1",
    }
    parsed = LeaseGrant.model_validate(grant)
    assert parsed.task == Task.model_validate(TASK)


def test_what_a_runner_sends_is_parsed_strictly():
    with pytest.raises(ValidationError, match="energy_j"):
        ResultPayload.model_validate({**RESULT, "energy_j": 1.0})
    with pytest.raises(ValidationError, match="gpu"):
        ResultPayload.model_validate({**RESULT, "hardware": {"gpu": "H100"}})
    with pytest.raises(ValidationError):
        Submission.model_validate(
            {"attempt": 1, "result": RESULT, "signature": a_signature(), "x": 1}
        )


# -- what is signed ----------------------------------------------------------------------


def test_the_signed_bytes_are_the_canonical_json_of_the_dump():
    payload = ResultPayload.model_validate(RESULT)
    assert result_digest(payload) == sha256_hex(canonical_json(payload.model_dump(mode="json")))
    # the body a runner sends parses back to the same bytes on the server
    sent = canonical_json(payload.model_dump(mode="json"))
    assert ResultPayload.model_validate_json(sent).model_dump(mode="json") == json.loads(sent)


class ResultPayload11(ResultPayload):
    """A later minor version: one optional measurement added, as the rules say."""

    energy_j: float | None = added_field("Energy the evaluation used, in joules.", ge=0)


def verifies(task: Task, lease_id: int, attempt: int, body: bytes, server_model: type) -> bool:
    """What the server does with a submission body: parse, hash, check the signature."""
    submission = json.loads(body)
    payload = server_model.model_validate(submission["result"])
    signature = submission["signature"]
    message = message_for_task(
        task, lease_id, attempt, result_digest(payload), signature["signed_at"]
    )
    try:
        VerifyKey(bytes(KEY.signing_key.verify_key)).verify(
            message, bytes.fromhex(signature["value"])
        )
    except BadSignatureError:
        return False
    return True


KEY = new_key(Path("never-written.key"))


def signed_body(payload: ResultPayload, task: Task) -> bytes:
    signature = KEY.sign_result(task, 3, 1, payload)
    return canonical_json(
        {
            "attempt": 1,
            "result": payload.model_dump(mode="json"),
            "signature": signature.model_dump(),
        }
    )


def test_an_optional_field_added_later_leaves_older_runners_signatures_valid():
    task = Task.model_validate(TASK)
    old = ResultPayload.model_validate(RESULT)  # a 1.0 runner: no such field
    body = signed_body(old, task)
    assert verifies(task, 3, 1, body, ResultPayload11), "a 1.1 server verifies a 1.0 result"
    absent = ResultPayload11.model_validate(RESULT)  # a 1.1 runner without a measurement
    assert "energy_j" not in absent.model_dump(mode="json")
    assert result_digest(absent) == result_digest(old)
    assert verifies(task, 3, 1, signed_body(absent, task), ResultPayload11)


def test_an_optional_field_present_is_signed():
    task = Task.model_validate(TASK)
    present = ResultPayload11.model_validate({**RESULT, "energy_j": 12.5})
    assert present.model_dump(mode="json")["energy_j"] == 12.5
    assert result_digest(present) != result_digest(ResultPayload.model_validate(RESULT))
    body = signed_body(present, task)
    assert verifies(task, 3, 1, body, ResultPayload11)
    tampered = body.replace(b'"energy_j":12.5', b'"energy_j":1.5')
    assert tampered != body
    assert not verifies(task, 3, 1, tampered, ResultPayload11)


def test_the_engines_environment_is_a_protocol_hardware_record():
    """Every library the engine records has a field: a runner can always say what it ran."""
    environment = {
        "hardware": hardware(),
        "libraries": {name: "1" for name in library_versions()},
        "batch_size": 4,
        "device": "cpu",
    }
    from quorumbench.evaluation import environment as module

    every = {"python": "3"} | {name: "1" for name in module._LIBRARIES}
    for libraries in (environment["libraries"], every):
        parsed = Hardware.model_validate({**environment, "libraries": libraries})
        assert parsed.model_dump(mode="json")["libraries"] == libraries


def test_statuses_are_one_enum():
    assert [s.value for s in protocol.TaskStatus] == ["PENDING", "DONE", "DISPUTED"]
    assert protocol.TaskStatus("DONE") == "DONE"
