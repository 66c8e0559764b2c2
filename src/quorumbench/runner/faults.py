"""Whose fault it is when a task cannot be done: this runner's setup, or the model's.

A **setup** error is this machine's: the benchmark data is missing or is not the
pinned version, an optional package is not installed, this quorumbench is out of date
for the task's benchmark, the sandbox cannot start (for the model, or for the code a
code benchmark runs: ``CodeExecutorError``). It would happen again on every
task of that benchmark, so the runner gives the lease back (no failure is recorded:
the task is fine, and another runner takes it) and stops with one line saying what to
fix here.

Anything else that goes wrong while a task is evaluated is the **model**'s (or the
task's): the model does not load, its sandbox dies or runs out of time, its endpoint
never answers or is not allowed. That is reported as the task's failure
(``POST /v0/leases/{id}/failure``), which is how the model's owner learns why, and how
the server pauses a model whose tasks keep failing.

Only errors raised in the runner's own process count as setup errors: what a
sandboxed worker (model code) says about itself arrives as a :class:`SandboxError`,
the model's, whatever it claims.

A refusal of a submitted result is classified here too: one that will refuse every
result of this runner (a bad token, a missing scope, a revoked or foreign key, a
protocol version the server no longer accepts) ends the runner; others only end the
task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from quorumbench.errors import (
    AuthenticationError,
    ChecksumMismatchError,
    CodeExecutorError,
    ConfigError,
    DataError,
    DataNotFoundError,
    MissingDependencyError,
    PermissionDeniedError,
    QuorumError,
    SignatureError,
    UnknownBenchmarkError,
    UnsupportedProtocolError,
)

Fault = Literal["setup", "model"]


class RunnerSetupError(ConfigError):
    """This runner cannot do a task until its owner fixes something on this machine."""

    code = "runner-setup"


_SETUP = (
    RunnerSetupError,
    CodeExecutorError,
    MissingDependencyError,
    DataNotFoundError,
    ChecksumMismatchError,
    UnknownBenchmarkError,
)
_ENDS_RUNNER = (
    AuthenticationError,
    PermissionDeniedError,
    SignatureError,
    UnsupportedProtocolError,
)


def fault_of(exc: BaseException) -> Fault:
    """``"setup"`` for an error of this machine's setup, else ``"model"``."""
    return "setup" if isinstance(exc, _SETUP) else "model"


def refusal_ends_runner(exc: QuorumError) -> bool:
    """Whether the server's refusal of a result will refuse every result of this runner."""
    return isinstance(exc, _ENDS_RUNNER)


def datasets_hint(datasets_dir: Path | None) -> str:
    """Where this runner reads benchmark data, and how to change it."""
    where = datasets_dir if datasets_dir is not None else "the Hub"
    return (
        f"this runner reads benchmark data from {where}; point --datasets-dir or "
        "QB_RUNNER_DATASETS_DIR (or QB_DATASETS_DIR) at a local copy laid out like "
        "shared/datasets"
    )


def setup_error(exc: QuorumError, datasets_dir: Path | None) -> RunnerSetupError:
    """``exc`` (a setup error) as one line saying what to fix on this machine.

    A data error names the settings the runner reads (the engine's own advice about
    the datasets directory, which names no setting, is replaced by them).
    """
    if isinstance(exc, RunnerSetupError):
        return exc
    message = exc.message
    if isinstance(exc, DataError):
        if exc.hint is not None and exc.hint.setting == "datasets_dir":
            message = exc.reason
        message = f"{message}; {datasets_hint(datasets_dir)}"
    elif isinstance(exc, UnknownBenchmarkError):
        message = f"{message}: this runner's quorumbench is out of date, upgrade it"
    return RunnerSetupError(message)
