import json
import re
from pathlib import Path

import pytest

from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark, generate_item
from quorumbench.core.canonical import outputs_digest, sha256_hex
from quorumbench.errors import ConfigError
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate, select_samples


def oracle(prompt: str) -> str:
    """Answers arith questions correctly by regenerating them from the prompt."""
    question = prompt.rsplit("Question: ", 1)[1].split("\nAnswer:")[0].strip()
    for i in range(100_000):
        item = generate_item(f"{i:05d}")
        if item.question == question:
            return f"{item.worked}\n#### {item.answer}\nQuestion: more"
    raise AssertionError("question not found")


@pytest.fixture(scope="module")
def arith():
    return ArithBenchmark(BenchmarkContext(shots=1))


def test_a_perfect_model_scores_one(arith):
    backend = MockBackend(lambda p: oracle(p), is_chat=False)
    # Only ids whose questions are cheap to find: restrict the search by seed choice.
    result = evaluate(arith, backend, EvalConfig(n=3, seed="t", batch_size=2))
    assert result.score == 1.0
    assert result.n == 3
    assert all(s.correct for s in result.samples)
    # the stop sequence cut the trailing "Question:"
    assert all("Question" not in s.output for s in result.samples)


def test_hashes_bind_outputs_in_order(arith):
    result = evaluate(arith, MockBackend(lambda p: "#### 1"), EvalConfig(n=4, seed="x"))
    for sample in result.samples:
        assert sample.output_sha256 == sha256_hex(sample.output)
    assert result.outputs_sha256 == outputs_digest((s.id, s.output_sha256) for s in result.samples)


def test_same_inputs_same_result(arith):
    a = evaluate(arith, MockBackend(lambda p: p[-7:]), EvalConfig(n=5, seed="d"))
    b = evaluate(arith, MockBackend(lambda p: p[-7:]), EvalConfig(n=5, seed="d"))
    assert a.outputs_sha256 == b.outputs_sha256
    assert [s.prompt_sha256 for s in a.samples] == [s.prompt_sha256 for s in b.samples]


def test_prompt_style_follows_the_model(arith):
    chat = MockBackend(is_chat=True)
    evaluate(arith, chat, EvalConfig(n=1))
    assert chat.seen[0].prompt.messages is not None
    plain = MockBackend(is_chat=False)
    evaluate(arith, plain, EvalConfig(n=1))
    assert plain.seen[0].prompt.text is not None


def test_chat_style_needs_a_chat_model(arith):
    with pytest.raises(ConfigError, match="no chat template"):
        evaluate(arith, MockBackend(is_chat=False), EvalConfig(n=1, prompt_style="chat"))


@pytest.mark.parametrize(
    "config", [EvalConfig(n=0), EvalConfig(n=100_001), EvalConfig(batch_size=0)]
)
def test_bad_config(arith, config):
    with pytest.raises(ConfigError):
        evaluate(arith, MockBackend(), config)


def test_json_has_the_documented_keys(arith):
    result = evaluate(arith, MockBackend(lambda p: "#### 3"), EvalConfig(n=2, seed="j"))
    doc = json.loads(json.dumps(result.to_json()))
    for key in (
        "schema",
        "model",
        "benchmark",
        "score",
        "n",
        "outputs_sha256",
        "predictions_sha256",
        "sample_predictions",
        "samples",
        "runtime_s",
        "tokens_per_s",
        "environment",
        "sampling",
        "ci95",
    ):
        assert key in doc
    for key in (
        "id",
        "output_sha256",
        "prediction",
        "correct",
        "labels",
        "prompt_sha256",
        "output",
    ):
        assert key in doc["samples"][0]
    assert doc["benchmark"]["dataset_sha256"] == arith.dataset_sha256
    assert doc["sampling"] == {"scheme": "qb-sample-v1", "seed": "j", "n": 2}
    assert "python" in doc["environment"]["libraries"]


def test_every_key_of_the_result_file_is_documented(arith):
    docs = Path(__file__).resolve().parents[3] / "docs" / "results-format.md"
    text = docs.read_text()
    top, sample = text.split("Each entry of `samples`:")
    documented = set(re.findall(r"^\| `(\w+)` \|", top, flags=re.M))
    documented_sample = set(re.findall(r"^\| `(\w+)` \|", sample, flags=re.M))
    doc = evaluate(arith, MockBackend(lambda p: "#### 3"), EvalConfig(n=1)).to_json()
    assert set(doc) == documented
    assert set(doc["samples"][0]) == documented_sample


def test_selected_samples_follow_sampling(arith):
    ids = [s.id for s in select_samples(arith, 3, "abc")]
    assert ids == [s.id for s in select_samples(arith, 5, "abc")][:3]
