import math

import pytest

from quorumbench.core.comparison import SubjectScore, separated, subject_scores
from quorumbench.core.intervals import score_interval


def test_subject_scores_are_means_with_the_leaderboard_interval():
    got = subject_scores({"law": [1.0, 0.0, 1.0, 1.0], "art": [0.5]})
    low, high = score_interval(3.0, 4)
    assert got[0] == SubjectScore("law", 0.75, low, high, 4)
    assert got[1].subject == "art" and got[1].score == 0.5 and got[1].n_samples == 1
    assert got[1].ci_low < 0.5 < got[1].ci_high  # one sample: never a point


def test_subject_scores_all_wrong_is_not_a_point():
    (only,) = subject_scores({"x": [0.0] * 8})
    assert (only.score, only.ci_low) == (0.0, 0.0)
    assert only.ci_high == pytest.approx(0.369, abs=1e-3)


def test_subject_scores_most_samples_first_then_by_name():
    got = subject_scores({"b": [1.0], "c": [1.0, 1.0], "a": [0.0]})
    assert [s.subject for s in got] == ["c", "a", "b"]
    assert subject_scores({}) == []


def test_subject_interval_takes_the_exact_sum():
    group = [0.1] * 10  # sum() gives 0.9999999999999999, fsum 1.0
    (only,) = subject_scores({"x": group})
    assert (only.ci_low, only.ci_high) == score_interval(math.fsum(group), 10)


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], False),
        ([(0.1, 0.2)], False),
        ([(0.1, 0.5), (0.4, 0.9)], False),
        ([(0.1, 0.4), (0.4, 0.9)], False),  # touching ends overlap
        ([(0.1, 0.3), (0.4, 0.9)], True),
        ([(0.4, 0.9), (0.1, 0.3)], True),  # either order
        ([(0.1, 0.5), (0.3, 0.7), (0.6, 0.9)], True),  # the first and last do not meet
    ],
)
def test_separated(intervals, expected):
    assert separated(intervals) is expected
