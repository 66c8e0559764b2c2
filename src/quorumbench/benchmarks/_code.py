"""What the code benchmarks (HumanEval, MBPP) share: labels, code extraction, scoring.

A code benchmark never runs code itself. It builds one self-contained program (the
completion and the problem's tests) and hands it to the context's
:class:`~quorumbench.evaluation.execution.CodeExecutor`, the runner's sandbox. Without
an executor it still loads and lists its samples (the server does only that) but
refuses to build requests or to score (:class:`SandboxRequiredError`), so nothing is
generated that could not be scored. An executor that breaks (``error``) raises
:class:`CodeExecutorError`: a program it could not run is not a wrong answer.

The prediction (what runners compare through digests) is the model's code exactly as
it was run, trailing whitespace removed: the same output always gives the same
program, so the same prediction means the same verdict.
"""

from __future__ import annotations

from quorumbench.errors import CodeExecutorError, SandboxRequiredError
from quorumbench.evaluation.benchmark import Labels, Scored
from quorumbench.evaluation.execution import CodeExecutor
from quorumbench.evaluation.extract import AFTER_PYTHON_BLOCK, FENCE, PYTHON_FENCES

LABELS = Labels(skill="reasoning", subject="tech/coding", format="code")
TIMEOUT_S = 10.0
"""Wall-clock seconds one program may run (also its CPU-time limit). lm-eval's
``code_eval`` allows 3 s; a busy volunteer machine needs more, and a timeout that
depends on the machine would make runners disagree."""
CHAT_STOPS = (AFTER_PYTHON_BLOCK,)
"""A chat answer stops once its first Python block is closed: :func:`fenced_code` scores
that block whatever follows it, so the prediction is the one a longer answer gives
(small instruct models rarely end their turn after the code, and otherwise explain
and test it up to the token limit)."""


def fenced_code(text: str) -> str:
    """The first fenced code block of a chat answer (Python's, if it names a language),
    an unclosed fence running to the end; the whole answer when there is no fence."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]
    if not blocks:
        return text
    for language, code in blocks:
        if language in PYTHON_FENCES:
            return code
    return blocks[0][1]


def canonical_code(code: str) -> str | None:
    """The prediction for ``code``: without trailing whitespace; None when empty."""
    code = code.rstrip()
    return code or None


def require_executor(executor: CodeExecutor | None, benchmark: str) -> CodeExecutor:
    """The executor, or a :class:`SandboxRequiredError` saying why there is none."""
    if executor is None:
        raise SandboxRequiredError(
            f"{benchmark} scores by running the model's code, and no sandbox was given to "
            "run it in: install bubblewrap (`apt-get install bubblewrap`), or pass "
            "--no-sandbox to run generated code without one (only code you trust)"
        )
    return executor


def run_program(
    executor: CodeExecutor | None, benchmark: str, program: str, prediction: str | None
) -> Scored:
    """Score ``program`` by running it: passed is 1, anything else 0."""
    execution = require_executor(executor, benchmark).run(program, timeout_s=TIMEOUT_S)
    if execution.status == "error":
        raise CodeExecutorError(
            f"the {executor.kind if executor else '?'} executor could not run a "
            f"{benchmark} program: {execution.detail}"
        )
    passed = execution.status == "passed"
    return Scored(prediction, passed, 1.0 if passed else 0.0)
