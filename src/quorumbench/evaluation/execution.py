"""Running generated code: the contract between code benchmarks and the sandbox.

A code benchmark (HumanEval, MBPP) scores a completion by running it with the
problem's tests. It never runs code itself: it hands one self-contained Python
program to a :class:`CodeExecutor`, which the runner backs with its sandbox (no
network, read-only files but a private temporary directory, CPU-time, memory and
process limits, a wall-clock timeout). The server never executes model output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

ExecutionStatus = Literal["passed", "failed", "timeout", "error"]


@dataclass(frozen=True)
class Execution:
    """How one program ran.

    ``passed``: it exited with status 0 within its limits; ``failed``: a non-zero exit
    (an assertion, an exception, a limit the kernel enforced: memory, processes, file
    size, CPU time); ``timeout``: still running when its wall-clock time was up (it was
    killed); ``error``: the executor itself could not run it (never the program's
    fault; the benchmark raises rather than scoring it).
    """

    status: ExecutionStatus
    detail: str = ""
    """A short, printable account (the last line of stderr, the limit hit)."""
    seconds: float = 0.0


@runtime_checkable
class CodeExecutor(Protocol):
    """Runs one Python program in isolation and says how it went."""

    @property
    def kind(self) -> str:
        """``bwrap``, ``unshare`` or ``none`` (no sandbox: only on request)."""
        ...

    def run(self, program: str, *, timeout_s: float) -> Execution:
        """Run ``program`` (Python source) with a fresh private temporary directory."""
        ...


def runs_code(benchmark: object) -> bool:
    """Whether ``benchmark`` scores by running generated code (a code benchmark says so
    with a class attribute ``runs_code = True``); such a one needs an executor."""
    return getattr(benchmark, "runs_code", False) is True
