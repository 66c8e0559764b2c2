"""The canonical prediction per benchmark kind, and the run's predictions digest."""

import hashlib
import json
from pathlib import Path

import pytest

from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks import load_benchmark
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.core.canonical import predictions_digest
from quorumbench.evaluation.backend import ChoiceResult, GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext, Scored
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.predictions import canonical_prediction, predictions_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "custom"


@pytest.mark.parametrize(
    ("kind", "prediction", "canonical"),
    [
        ("choice", "0", 0),
        ("choice", "12", 12),
        ("choice", None, None),
        ("generate", "18", "18"),
        ("generate", "-3.5", "-3.5"),
        ("generate", "Paris", "Paris"),
        ("generate", "", ""),
        ("generate", None, None),
    ],
)
def test_the_canonical_prediction_per_kind(kind, prediction, canonical):
    found = canonical_prediction(kind, Scored(prediction, False, 0.0))
    assert found == canonical and type(found) is type(canonical)


@pytest.mark.parametrize("prediction", ["B", "-1", "01", "+1", " 1", "1.0", "\u0663", ""])
def test_a_choice_prediction_must_be_an_option_index(prediction):
    with pytest.raises(ValueError, match="must be an option index"):
        canonical_prediction("choice", Scored(prediction, False, 0.0))


def test_the_digest_is_sha256_of_the_canonical_json_list():
    predictions = [0, "18", None, "é"]
    expected = hashlib.sha256('[0,"18",null,"é"]'.encode()).hexdigest()
    assert predictions_digest(predictions) == expected
    assert predictions_digest(iter(predictions)) == expected
    assert predictions_digest([1]) != predictions_digest(["1"])  # typed, not stringly
    assert predictions_digest([0, 1]) != predictions_digest([1, 0])  # ordered


def test_custom_choice_and_generate_benchmarks():
    capitals = load_benchmark(str(FIXTURES / "capitals.yaml"), BenchmarkContext())
    (sample,) = capitals.samples(["jp"])
    scored = [
        capitals.score(sample, ChoiceResult("loglikelihood", (-2.0, -1.0, -1.0))),
        capitals.score(sample, ChoiceResult("letter", chosen=2)),
        capitals.score(sample, ChoiceResult("letter", chosen=None)),
    ]
    assert predictions_of("choice", scored) == [1, 2, None]  # a tie goes to the first
    sums = load_benchmark(str(FIXTURES / "sums.yaml"), BenchmarkContext())
    (item,) = sums.samples(["0000"])
    texts = ["5\nmore", "no number here"]
    scored = [sums.score(item, GenerateResult(t, 3, "eos")) for t in texts]
    assert predictions_of("generate", scored) == ["5", None]


def test_arith_predicts_the_normalised_final_number():
    arith = ArithBenchmark(BenchmarkContext(shots=0))
    (sample,) = arith.samples(["00001"])
    outputs = ["so 1,200.00 apples\n#### $1,200.00", "I think 7, or 8", "no idea"]
    scored = [arith.score(sample, GenerateResult(t, 5, "eos")) for t in outputs]
    assert predictions_of("generate", scored) == ["1200", "8", None]


@pytest.mark.data
def test_truthfulqa_mc1_and_mc2_predict_the_highest_ranked_option(datasets_dir):
    context = BenchmarkContext(datasets_dir)
    mc1 = load_benchmark("truthfulqa-mc1", context)
    (sample,) = mc1.samples(["0000"])
    n = len(sample.fields["options"])
    lls = tuple([-5.0] * n)
    lls = lls[:1] + (-1.0,) + lls[2:]
    assert (
        canonical_prediction("choice", mc1.score(sample, ChoiceResult("loglikelihood", lls))) == 1
    )
    mc2 = load_benchmark("truthfulqa-mc2", context)
    (sample,) = mc2.samples(["0000"])
    truth = sample.fields["truth"]
    false = truth.index(False)
    # Most of the mass is on the true options, but the single best option is false:
    # MC2's score is the mass, its prediction the best option.
    lls = tuple(-1.0 if t else -30.0 for t in truth)
    lls = lls[:false] + (-0.5,) + lls[false + 1 :]
    scored = mc2.score(sample, ChoiceResult("loglikelihood", lls))
    assert scored.score > 0.5
    assert canonical_prediction("choice", scored) == false


def test_a_run_records_its_predictions_and_their_digest():
    arith = ArithBenchmark(BenchmarkContext(shots=0))
    answers = iter(["#### 3", "no number", "#### 1,000"])
    result = evaluate(arith, MockBackend(lambda p: next(answers)), EvalConfig(n=3, seed="p"))
    assert result.sample_predictions == ["3", None, "1000"]
    assert result.sample_predictions == [s.prediction for s in result.samples]
    assert result.predictions_sha256 == predictions_digest(["3", None, "1000"])
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["sample_predictions"] == ["3", None, "1000"]
    assert doc["predictions_sha256"] == result.predictions_sha256


def test_outputs_differ_between_batch_sizes_while_predictions_do_not():
    """A backend whose log-likelihoods move in the 4th decimal with the batch size, as
    a real one's do when its batches are padded differently."""
    capitals = load_benchmark(str(FIXTURES / "capitals.yaml"), BenchmarkContext())
    answers = {"Paris", "Tokyo", "Ottawa", "Canberra"}

    def backend(batch_size: int) -> MockBackend:
        def score(request):
            noise = 0.0001 * {1: 0, 8: 1, 16: 2}[batch_size]
            return [(-1.0 if c.strip() in answers else -4.0) - noise for c in request.continuations]

        return MockBackend(score=score)

    runs = [
        evaluate(capitals, backend(size), EvalConfig(n=4, seed="b", batch_size=size))
        for size in (1, 8, 16)
    ]
    assert len({r.outputs_sha256 for r in runs}) == 3
    assert len({r.predictions_sha256 for r in runs}) == 1
    gold = {"fr": 0, "jp": 1, "ca": 2, "au": 1}
    assert runs[0].sample_predictions == [gold[s.id] for s in runs[0].samples]
