import math

import pytest

from quorumbench.core.leaderboard import (
    Accumulator,
    Interval,
    interval,
    overlapping,
    weighted_aggregate,
)


def test_incremental_equals_batch():
    acc = Accumulator().add_task(0.5, [1, 0, 1, 0]).add_task(1.0, [1, 1])
    assert (acc.n_tasks, acc.n_samples) == (2, 6)
    result = interval(acc)
    assert result.score == pytest.approx((0.5 * 4 + 1.0 * 2) / 6)
    samples = [1, 0, 1, 0, 1, 1]
    mean = sum(samples) / 6
    var = sum((s - mean) ** 2 for s in samples) / 5
    assert result.stderr == pytest.approx(math.sqrt(var / 6))
    assert result.ci_low == pytest.approx(max(0, result.score - 1.959963984540054 * result.stderr))


def test_single_sample_has_no_spread():
    assert interval(Accumulator().add_task(1.0, [1.0])) == Interval(1.0, 0.0, 1.0, 1.0)


def test_errors():
    with pytest.raises(ValueError):
        interval(Accumulator())
    with pytest.raises(ValueError):
        Accumulator().add_task(0.5, [])
    with pytest.raises(ValueError):
        weighted_aggregate([])


def test_weighted_aggregate():
    a, b = Interval(0.8, 0.1, 0.6, 1.0), Interval(0.4, 0.2, 0.0, 0.8)
    agg = weighted_aggregate([(1.0, a), (3.0, b)])
    assert agg.score == pytest.approx(0.5)
    assert agg.stderr == pytest.approx(math.sqrt(0.1**2 + (3 * 0.2) ** 2) / 4)


def test_overlap_flags():
    rows = [(0.9, 0.85, 0.95), (0.5, 0.4, 0.6), (0.55, 0.5, 0.65), (0.1, 0.0, 0.2)]
    assert overlapping(rows) == [False, True, True, False]
