"""MBPP: Hub loading at the pinned revision (a parquet fixture with the Hub's exact
columns stands in for the download), the local alternative, lm-eval's prompt, the
program and its scoring."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quorumbench.benchmarks import DEFAULT_PILLARS, load_benchmark, mbpp
from quorumbench.core.canonical import sha256_hex
from quorumbench.core.taxonomy import label_problems
from quorumbench.errors import (
    ChecksumMismatchError,
    CodeExecutorError,
    ConfigError,
    DataError,
    DataNotFoundError,
    SandboxRequiredError,
)
from quorumbench.evaluation.backend import GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.execution import Execution, runs_code
from quorumbench.evaluation.extract import AFTER_PYTHON_BLOCK

SCHEMA = pa.schema(
    [
        ("task_id", pa.int64()),
        ("text", pa.string()),
        ("code", pa.string()),
        ("test_list", pa.list_(pa.string())),
        ("test_setup_code", pa.string()),
        ("challenge_test_list", pa.list_(pa.string())),
    ]
)
ROWS = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given "
        "character from the string.",
        "code": "def remove_Occ(s,ch): \r\n    return s",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function to sort a given matrix.",
        "code": "def sort_matrix(M):\r\n    return sorted(M, key=sum)",
        "test_list": ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"],
        "test_setup_code": "import math",
        "challenge_test_list": ["assert f(4) == 4"],
    },
]


@dataclass
class FakeExecutor:
    status: str = "passed"
    programs: list[str] = field(default_factory=list)
    kind: str = "fake"

    def run(self, program, *, timeout_s):
        self.programs.append(program)
        return Execution(self.status, "scripted", 0.01)  # type: ignore[arg-type]


@pytest.fixture
def parquet_file(tmp_path):
    path = tmp_path / "hub" / "test-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(ROWS, schema=SCHEMA), path)
    return path


@pytest.fixture
def hub(parquet_file, monkeypatch):
    """The Hub download answers with the fixture; the pin is the fixture's digest."""
    calls = []

    def download(repo_id, filename, *, revision, repo_type):
        calls.append((repo_id, filename, revision, repo_type))
        return str(parquet_file)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", download)
    pinned = replace(mbpp.TEST, sha256=sha256_hex(parquet_file.read_bytes()))
    monkeypatch.setattr(mbpp.MbppBenchmark, "file", pinned)
    return calls


def test_it_downloads_the_pinned_revision_and_checks_the_file(hub, parquet_file):
    executor = FakeExecutor()
    bench = mbpp.MbppBenchmark(BenchmarkContext(executor=executor))
    assert hub == [
        (
            "google-research-datasets/mbpp",
            "full/test-00000-of-00001.parquet",
            "4bb6404fdc6cacfda99d4ac4205087b89d32030c",
            "dataset",
        )
    ]
    assert bench.source.kind == "hub" and bench.source.revision == mbpp.HUB_REVISION
    assert bench.dataset_sha256 == sha256_hex(parquet_file.read_bytes())
    assert bench.sample_ids() == ["011", "012"]


def test_a_file_that_is_not_the_pinned_one_is_refused(hub, monkeypatch):
    monkeypatch.setattr(mbpp.MbppBenchmark, "file", mbpp.TEST)  # the real pin
    with pytest.raises(ChecksumMismatchError, match=mbpp.SHA256):
        mbpp.MbppBenchmark(BenchmarkContext())


def test_without_a_pin_the_digest_is_that_of_the_bytes_read(hub, parquet_file, monkeypatch):
    monkeypatch.setattr(mbpp.MbppBenchmark, "file", replace(mbpp.TEST, sha256=None))
    bench = mbpp.MbppBenchmark(BenchmarkContext())
    assert bench.dataset_sha256 == sha256_hex(parquet_file.read_bytes())


def test_a_datasets_directory_copy_comes_first(hub, parquet_file, tmp_path):
    local = tmp_path / "data" / "mbpp" / "test-00000-of-00001.parquet"
    local.parent.mkdir(parents=True)
    local.write_bytes(parquet_file.read_bytes())
    bench = mbpp.MbppBenchmark(BenchmarkContext(tmp_path / "data"))
    assert bench.source.kind == "local" and bench.source.location == str(local.resolve())
    assert hub == []


def test_offline_the_error_names_the_local_alternative(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", offline)
    with pytest.raises(DataNotFoundError, match="cannot download") as refused:
        mbpp.MbppBenchmark(BenchmarkContext(tmp_path))
    assert refused.value.hint is not None and refused.value.hint.setting == "datasets_dir"
    assert "mbpp/test-00000-of-00001.parquet" in refused.value.message


def test_a_file_without_the_hub_columns_is_refused(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"task_id": [1], "text": ["x"]}), path)
    with pytest.raises(DataError, match="lacks the columns code, test_list"):
        mbpp.parse_parquet(path.read_bytes())


def test_the_plain_prompt_is_lm_evals_three_shot(hub):
    bench = mbpp.MbppBenchmark(BenchmarkContext(executor=FakeExecutor()))
    sample = bench.samples(["011"])[0]
    request = bench.request(sample, "plain")
    text = request.prompt.text
    assert text is not None
    assert text.startswith(
        "You are an expert Python programmer, and here is your task: Write a function to "
        "find the similar elements from the given two tuple lists. Your code should pass "
        "these tests:\n\nassert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
    )
    assert "[BEGIN]\ndef similar_elements(test_tup1, test_tup2):\r\n  res = " in text
    assert text.count("\n[DONE]\n\nYou are an expert Python programmer") == 3
    assert text.endswith(
        "here is your task: Write a python function to remove first and last occurrence of "
        "a given character from the string. Your code should pass these tests:\n\nassert "
        'remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
        'assert remove_Occ("PHP","P") == "H"\n[BEGIN]\n'
    )
    assert request.stop == ("[DONE]",) and request.max_new_tokens == 256


def test_the_chat_prompt_puts_the_exemplars_in_earlier_turns(hub):
    bench = mbpp.MbppBenchmark(BenchmarkContext(executor=FakeExecutor()))
    request = bench.request(bench.samples(["011"])[0], "chat")
    messages = request.prompt.messages
    assert messages is not None
    assert [m.role for m in messages] == ["user", "assistant"] * 3 + ["user"]
    assert messages[1].content.startswith("```python\ndef similar_elements")
    assert "remove first and last occurrence" in messages[-1].content
    assert request.stop == (AFTER_PYTHON_BLOCK,)


def test_the_program_is_completion_setup_and_tests(hub):
    executor = FakeExecutor()
    bench = mbpp.MbppBenchmark(BenchmarkContext(executor=executor))
    first, second = bench.samples(["011", "012"])
    assert bench.score(first, GenerateResult("def remove_Occ(s, ch):\n    return s\n", 9, "stop"))
    assert executor.programs[0] == (
        "def remove_Occ(s, ch):\n    return s\n" + "\n".join(ROWS[0]["test_list"]) + "\n"
    )
    answer = "```python\ndef f(x):\n    return x\n```"
    scored = bench.score(second, GenerateResult(answer, 9, "eos"))
    assert scored.prediction == "def f(x):\n    return x"
    assert executor.programs[1] == (
        "def f(x):\n    return x\nimport math\n" + "\n".join(ROWS[1]["test_list"]) + "\n"
    )


def test_labels_pillar_and_refusals(hub):
    bench = load_benchmark("mbpp", BenchmarkContext())
    assert runs_code(bench) and DEFAULT_PILLARS["mbpp"] == "coding"
    sample = bench.samples(["012"])[0]
    assert label_problems(sample.labels.as_dict()) == [] and sample.chance == 0.0
    with pytest.raises(SandboxRequiredError):
        bench.request(sample, "plain")
    with pytest.raises(DataError, match="no sample '013'"):
        bench.samples(["013"])
    with pytest.raises(ConfigError, match="3 fixed exemplars"):
        mbpp.MbppBenchmark(BenchmarkContext(shots=5))
    broken = mbpp.MbppBenchmark(BenchmarkContext(executor=FakeExecutor("error")))
    with pytest.raises(CodeExecutorError):
        broken.score(sample, GenerateResult("x = 1", 3, "stop"))
