"""MBPP: 500 basic Python problems (the ``full`` config's test split), pass@1.

The data is ``full/test-00000-of-00001.parquet`` of the Hub dataset
``google-research-datasets/mbpp`` (Google, CC-BY-4.0) at the pinned revision
:data:`HUB_REVISION`, or the same file at ``<datasets_dir>/mbpp/`` when it is there;
its bytes must hash to :data:`SHA256`.

Plain style mirrors lm-evaluation-harness's ``mbpp`` task: three exemplars (the
prompt split's tasks 2, 3 and 4, as lm-eval lists them), each ``You are an expert
Python programmer, and here is your task: <text> Your code should pass these
tests:\\n\\n<three asserts>\\n[BEGIN]\\n<code>\\n[DONE]``, joined by a blank line, then
the problem up to ``[BEGIN]\\n``; greedy until ``[DONE]``, at most 256 new tokens. The
program is the completion, the problem's ``test_setup_code`` (lm-eval leaves it out;
the few problems that have one cannot pass without it) and its three asserts. Chat
style (lm-eval's ``mbpp_instruct`` wording) puts the exemplars in earlier turns and
takes the first fenced code block of the answer. The program runs in the context's
executor (the runner's sandbox); see ``benchmarks/_code.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    DataNotFoundError,
    Hint,
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

HUB_REPO = "google-research-datasets/mbpp"
HUB_REVISION = "4bb6404fdc6cacfda99d4ac4205087b89d32030c"
HUB_FILENAME = "full/test-00000-of-00001.parquet"
RELPATH = "mbpp/test-00000-of-00001.parquet"
SHA256 = "566fd53060ffba5766dace1d1e2f4c38906781526de222b0dfbdbc325b696c77"
"""SHA-256 of ``full/test-00000-of-00001.parquet`` at :data:`HUB_REVISION`, as several
independent public projects pin it (not downloaded here: this machine has no Hub)."""
DEFAULT_MAX_NEW_TOKENS = 256
PLAIN_STOPS = ("[DONE]",)
COLUMNS = ("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list")


@dataclass(frozen=True)
class HubFile:
    """One file of a Hub dataset repo at a commit; ``sha256`` None: no pin known."""

    repo_id: str
    revision: str
    filename: str
    relpath: str
    sha256: str | None


TEST = HubFile(HUB_REPO, HUB_REVISION, HUB_FILENAME, RELPATH, SHA256)


@dataclass(frozen=True)
class Exemplar:
    text: str
    code: str
    tests: tuple[str, str, str]


EXEMPLARS = (
    Exemplar(
        "Write a function to find the similar elements from the given two tuple lists.",
        "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & "
        "set(test_tup2))\r\n  return (res) ",
        (
            "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
            "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
            "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)",
        ),
    ),
    Exemplar(
        "Write a python function to identify non-prime numbers.",
        "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in "
        "range(2,int(math.sqrt(n)) + 1):\r\n        if n % i == 0:\r\n            result = "
        "True\r\n    return result",
        (
            "assert is_not_prime(2) == False",
            "assert is_not_prime(10) == True",
            "assert is_not_prime(35) == True",
        ),
    ),
    Exemplar(
        "Write a function to find the largest integers from a given list of numbers using "
        "heap queue algorithm.",
        "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = "
        "hq.nlargest(n, nums)\r\n  return largest_nums",
        (
            "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] ",
            "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] ",
            "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, "
            "58, 35]",
        ),
    ),
)
"""lm-eval's ``list_fewshot_samples`` (the prompt split's tasks 2, 3 and 4), verbatim."""


def plain_text(text: str, tests: Sequence[str]) -> str:
    """lm-eval's ``doc_to_text`` for one problem."""
    asserts = "\n".join(tests[:3])
    return (
        f"You are an expert Python programmer, and here is your task: {text} Your code "
        f"should pass these tests:\n\n{asserts}\n[BEGIN]\n"
    )


def chat_text(text: str, tests: Sequence[str]) -> str:
    """lm-eval's ``mbpp_instruct`` ``doc_to_text`` for one problem."""
    asserts = "\n".join(tests[:3])
    return (
        f"You are an expert Python programmer, and here is your task:\n{text}\nYour code "
        f"should pass these tests:\n{asserts}"
    )


def plain_prompt(text: str, tests: Sequence[str]) -> str:
    """Three exemplars and the problem, as lm-eval's ``mbpp`` builds its context."""
    shots = [plain_text(s.text, s.tests) + f"{s.code}\n[DONE]" for s in EXEMPLARS]
    return "\n\n".join([*shots, plain_text(text, tests)])


def mbpp_program(completion: str, setup: str, tests: Sequence[str]) -> str:
    """The completion, the setup code and the asserts, as one program."""
    parts = [completion, setup, *tests] if setup.strip() else [completion, *tests]
    return "\n".join(parts) + "\n"


def _download(file: HubFile) -> Path:
    from huggingface_hub import hf_hub_download

    return Path(
        hf_hub_download(file.repo_id, file.filename, revision=file.revision, repo_type="dataset")
    )


def read_file(file: HubFile, datasets_dir: Path | None) -> tuple[bytes, DataSourceInfo]:
    """The file's bytes (checked against its pin): ``datasets_dir`` when it holds the
    file, else the Hub at the pinned revision."""
    if datasets_dir is not None and (datasets_dir / file.relpath).is_file():
        path = datasets_dir / file.relpath
        source = DataSourceInfo("local", str(path.resolve()))
    else:
        try:
            path = _download(file)
        except ImportError as exc:
            raise MissingDependencyError(exc.name or "huggingface_hub", "hf") from exc
        except Exception as exc:
            raise DataNotFoundError(
                f"cannot download {file.repo_id}@{file.revision}/{file.filename} from the "
                f"Hub ({type(exc).__name__})",
                hint=Hint(
                    "datasets_dir", f"offline, give a datasets directory that holds {file.relpath}"
                ),
            ) from exc
        source = DataSourceInfo("hub", f"{file.repo_id}/{file.filename}", file.revision)
    data = path.read_bytes()
    if file.sha256 is not None and sha256_hex(data) != file.sha256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {path}: expected sha256 {file.sha256}, got "
            f"{sha256_hex(data)}; it is not {file.filename} at {file.repo_id}@{file.revision}"
        )
    return data, source


def parse_parquet(data: bytes) -> list[dict[str, Any]]:
    """The rows of an MBPP parquet file, checked for the Hub's columns."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "pyarrow", "hf") from exc
    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as exc:
        raise DataError(f"cannot read the MBPP parquet file: {exc}") from exc
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise DataError(f"the MBPP parquet file lacks the columns {', '.join(missing)}")
    rows: list[dict[str, Any]] = table.select(list(COLUMNS)).to_pylist()
    for row in rows:
        if not (isinstance(row["task_id"], int) and len(row["test_list"] or ()) >= 3):
            raise DataError(f"MBPP task {row['task_id']!r}: no id or fewer than three tests")
    return rows


class MbppBenchmark:
    """MBPP, full config, test split (500 problems), pass@1 with greedy decoding."""

    name = "mbpp"
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "generate"
    runs_code = True
    file = TEST

    def __init__(self, context: BenchmarkContext) -> None:
        if context.shots not in (None, len(EXEMPLARS)):
            raise ConfigError(f"mbpp uses lm-eval's {len(EXEMPLARS)} fixed exemplars")
        self._executor = context.executor
        self._max_new_tokens = context.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        data, self._source = read_file(self.file, context.datasets_dir)
        self._sha256 = self.file.sha256 or sha256_hex(data)
        self._rows = {f"{row['task_id']:03d}": row for row in parse_parquet(data)}

    @property
    def dataset_sha256(self) -> str:
        return self._sha256

    @property
    def source(self) -> DataSourceInfo:
        return self._source

    @property
    def config(self) -> Mapping[str, Any]:
        return {"max_new_tokens": self._max_new_tokens}

    def sample_ids(self) -> Sequence[str]:
        return list(self._rows)

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            row = self._rows.get(sample_id)
            if row is None:
                raise DataError(f"mbpp has no sample {sample_id!r}")
            fields = {
                "text": row["text"],
                "tests": list(row["test_list"]),
                "setup": row["test_setup_code"] or "",
            }
            out.append(Sample(sample_id, LABELS, fields))
        return out

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest:
        require_executor(self._executor, self.name)  # refuse before anything is generated
        text, tests = sample.fields["text"], sample.fields["tests"]
        if style == "plain":
            prompt = Prompt(text=plain_prompt(text, tests))
            return GenerateRequest(prompt, PLAIN_STOPS, self._max_new_tokens)
        messages = []
        for shot in EXEMPLARS:
            messages.append(ChatMessage("user", chat_text(shot.text, shot.tests)))
            messages.append(ChatMessage("assistant", f"```python\n{shot.code}\n```"))
        messages.append(ChatMessage("user", chat_text(text, tests)))
        return GenerateRequest(Prompt(messages=tuple(messages)), CHAT_STOPS, self._max_new_tokens)

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        if not isinstance(result, GenerateResult):
            raise TypeError("mbpp scores generated text")
        prediction = canonical_code(fenced_code(result.text))
        program = mbpp_program(prediction or "", sample.fields["setup"], sample.fields["tests"])
        return run_program(self._executor, self.name, program, prediction)
