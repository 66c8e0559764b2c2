import re

from quorumbench.benchmarks.arith import ArithBenchmark, generate_item
from quorumbench.evaluation.backend import GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext


def test_items_are_a_pure_function_of_the_id():
    assert generate_item("00000").question == (
        "Quinn collects 6 marbles a day for 5 days, then loses 9. A friend then multiplies "
        "what is left by 3. How many marbles are there now?"
    )
    assert generate_item("00000").answer == 63
    assert generate_item("12345") == generate_item("12345")


def test_worked_solutions_compute_the_answer():
    # Every "a op b = c" step in the worked solution is true arithmetic.
    for i in range(300):
        item = generate_item(f"{i:05d}")
        for a, op, b, c in re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", item.worked):
            assert eval(f"{a}{op}{b}") == int(c)  # digits and one operator only
        assert item.worked.endswith(f"{item.answer}.")
        assert item.answer >= 0


def test_subjects_cover_all_kinds():
    subjects = {generate_item(f"{i:05d}").subject for i in range(200)}
    assert subjects == {"addition-subtraction", "multiplication", "division", "multi-step"}


def test_scoring():
    bench = ArithBenchmark(BenchmarkContext())
    (sample,) = bench.samples(["00000"])
    assert bench.score(sample, GenerateResult("... #### 63", 3, "eos")).correct
    assert not bench.score(sample, GenerateResult("I think 64", 3, "eos")).correct
    assert bench.score(sample, GenerateResult("so 63.", 3, "eos")).prediction == "63"


def test_shots_are_generated_exemplars():
    bench = ArithBenchmark(BenchmarkContext(shots=2))
    (sample,) = bench.samples(["00001"])
    request = bench.request(sample, "plain")
    assert request.prompt.text is not None
    assert request.prompt.text.count("Question:") == 3
    assert request.prompt.text.endswith("\nAnswer:")
    assert bench.config == {"shots": 2, "max_new_tokens": 128}


def test_unknown_ids_are_refused():
    import pytest

    from quorumbench.errors import DataError

    with pytest.raises(DataError, match="arith has no sample 'shot-0'"):
        ArithBenchmark(BenchmarkContext()).samples(["shot-0"])
