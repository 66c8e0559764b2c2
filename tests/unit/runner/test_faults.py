"""Whose fault a task's failure is: one table, and the wording of setup errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorumbench.errors import (
    AuthenticationError,
    BackendError,
    ChecksumMismatchError,
    ConfigError,
    ConflictError,
    DataError,
    DataNotFoundError,
    EndpointError,
    EndpointNotAllowedError,
    EvaluationTimeoutError,
    InvalidRefError,
    InvalidSubmissionError,
    MissingDependencyError,
    ModelLoadError,
    NotFoundError,
    PermissionDeniedError,
    SandboxError,
    SignatureError,
    UnknownBenchmarkError,
)
from quorumbench.evaluation.data import LOCAL_COPY
from quorumbench.runner.faults import (
    RunnerSetupError,
    fault_of,
    refusal_ends_runner,
    setup_error,
)


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        # this machine: the same on every task of the benchmark
        (DataNotFoundError("data file not found: /d/gsm8k/test.jsonl"), "setup"),
        (ChecksumMismatchError("checksum mismatch for /d/x"), "setup"),
        (MissingDependencyError("gguf", "gguf"), "setup"),
        (UnknownBenchmarkError("unknown benchmark 'new-one'"), "setup"),
        (RunnerSetupError("the task needs arith v3; this runner has v2"), "setup"),
        # the model's (or the task's): reported as the task's failure
        (ModelLoadError("weights are corrupt"), "model"),
        (EndpointNotAllowedError("http://127.0.0.1/v1: a loopback address"), "model"),
        (EndpointError("the endpoint never answered"), "model"),
        (SandboxError("the sandboxed worker died"), "model"),
        (SandboxError("in the sandbox: MissingDependencyError: …"), "model"),
        (EvaluationTimeoutError("the task ran past its time limit"), "model"),
        (BackendError("generation failed"), "model"),
        (InvalidRefError("bad ref"), "model"),
        (DataError("arith has no sample 'x'"), "model"),
        (ConfigError("the server sent a task this runner cannot read"), "model"),
        (RuntimeError("a bug"), "model"),
    ],
)
def test_whose_fault(error, fault):
    assert fault_of(error) == fault


@pytest.mark.parametrize(
    ("error", "ends"),
    [
        (AuthenticationError("unknown API token"), True),
        (PermissionDeniedError("this token lacks the 'task:submit' scope"), True),
        (SignatureError("key … was revoked"), True),
        (InvalidSubmissionError("n does not match"), False),
        (ConflictError("a different result"), False),
        (NotFoundError("no lease 4"), False),
    ],
)
def test_which_refusals_end_the_runner(error, ends):
    assert refusal_ends_runner(error) is ends


def test_a_data_error_names_what_the_runner_reads_instead_of_evals_advice():
    error = DataNotFoundError("gsm8k/train.jsonl has no Hub source", hint=LOCAL_COPY)
    assert error.message.endswith("; give a datasets directory that holds a local copy")
    message = setup_error(error, None).message
    assert message.startswith("gsm8k/train.jsonl has no Hub source; this runner reads ")
    assert "from the Hub" in message
    assert "--datasets-dir or QB_RUNNER_DATASETS_DIR (or QB_DATASETS_DIR)" in message
    assert "give a datasets directory" not in message
    local = setup_error(DataNotFoundError("data file not found: /d/x"), Path("/d")).message
    assert local.startswith("data file not found: /d/x; this runner reads benchmark data from /d")


def test_other_setup_errors_keep_their_message():
    error = MissingDependencyError("gguf", "gguf")
    assert setup_error(error, None).message == error.message
    same = RunnerSetupError("upgrade")
    assert setup_error(same, None) is same
    assert "out of date" in setup_error(UnknownBenchmarkError("unknown"), None).message
