import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.scoring import aggregate, argmax_first, mc1_correct, mc2_score


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0], 0),
        ([-3.0, -1.0, -2.0], 1),
        ([-1.0, -1.0, -2.0], 0),  # ties go to the first, like numpy.argmax
        ([-5.0, -2.0, -2.0], 1),
    ],
)
def test_argmax_first(values, expected):
    assert argmax_first(values) == expected


def test_argmax_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        argmax_first([])


@pytest.mark.parametrize(
    ("lls", "correct"),
    [
        ([-1.0, -2.0, -3.0], True),
        ([-2.0, -1.0, -3.0], False),
        ([-1.0, -1.0], True),  # a tie with the gold counts, as in lm-eval
    ],
)
def test_mc1(lls, correct):
    assert mc1_correct(lls) is correct


def test_mc2_matches_the_lm_eval_formula():
    lls = [-1.0, -2.0, -0.5, -3.0]
    truth = [True, True, False, False]
    p = [math.exp(x) for x in lls]
    expected = (p[0] + p[1]) / sum(p)
    assert mc2_score(lls, truth) == pytest.approx(expected, rel=1e-12)


def test_mc2_does_not_underflow_on_long_options():
    # exp(-2000) is 0.0 in floating point; lm-eval's direct formula gives 0/0 here.
    assert mc2_score([-2000.0, -2001.0], [True, False]) == pytest.approx(1 / (1 + math.exp(-1.0)))


@pytest.mark.parametrize(
    ("lls", "truth"),
    [([-1.0], [True, False]), ([-1.0, -2.0], [False, False])],
)
def test_mc2_rejects_bad_labels(lls, truth):
    with pytest.raises(ValueError):
        mc2_score(lls, truth)


@given(
    st.lists(st.floats(min_value=-500, max_value=0), min_size=2, max_size=12),
    st.data(),
)
def test_mc2_is_a_probability(lls, data):
    truth = data.draw(st.lists(st.booleans(), min_size=len(lls), max_size=len(lls)))
    if not any(truth):
        truth[0] = True
    assert 0.0 <= mc2_score(lls, truth) <= 1.0 + 1e-12


def test_aggregate_mean_and_interval():
    agg = aggregate([1.0, 0.0, 1.0, 1.0])
    assert agg.mean == 0.75
    assert agg.n == 4
    assert agg.stderr == pytest.approx(math.sqrt(0.25 / 4))
    # the exact (Clopper-Pearson) interval of 3 of 4, as the leaderboard shows it
    assert agg.ci_low == pytest.approx(0.19412045, abs=1e-7)
    assert agg.ci_high == pytest.approx(0.975 ** (1 / 4))  # Beta(4, 1): t**4


def test_a_run_whose_samples_all_agree_has_an_honest_interval():
    # mean ± 1.96·se would say [1, 1]: certainty that 8 samples cannot give
    agg = aggregate([1.0] * 8)
    assert agg.stderr == 0.0 and agg.ci_high == 1.0
    assert agg.ci_low == pytest.approx(0.025 ** (1 / 8))
    one = aggregate([0.5])
    assert one.stderr == 0.0 and one.ci_low < 0.5 < one.ci_high


def test_aggregate_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        aggregate([])
