import math
from datetime import UTC, datetime, timedelta

import pytest

from quorumbench.core.intervals import combined_interval, score_interval
from quorumbench.core.leaderboard import (
    NO_INTERVAL,
    Accumulator,
    BenchmarkPart,
    Interval,
    aggregate_basis,
    interval,
    model_aggregate,
    overlapping,
    weighted_aggregate,
)

Z95 = 1.959963984540054


def test_incremental_equals_batch():
    acc = Accumulator().add_task(0.5, [1, 0, 1, 0]).add_task(1.0, [1, 1])
    assert (acc.n_tasks, acc.n_samples) == (2, 6)
    result = interval(acc)
    assert result.score == pytest.approx((0.5 * 4 + 1.0 * 2) / 6)
    samples = [1, 0, 1, 0, 1, 1]
    mean = sum(samples) / 6
    var = sum((s - mean) ** 2 for s in samples) / 5
    assert result.stderr == pytest.approx(math.sqrt(var / 6))
    assert (result.ci_low, result.ci_high) == score_interval(4.0, 6)


def test_the_interval_is_exact_not_mean_plus_or_minus_se():
    """8 samples all wrong: the interval is [0, 0.369], not the point 0.000."""
    row = interval(Accumulator().add_task(0.0, [0.0] * 8))
    assert (row.score, row.stderr, row.ci_low) == (0.0, 0.0, 0.0)
    assert row.ci_high == pytest.approx(1 - 0.025 ** (1 / 8))
    right = interval(Accumulator().add_task(1.0, [1.0] * 3))
    assert right.ci_low == pytest.approx(0.025 ** (1 / 3)) and right.ci_high == 1.0


def test_the_interval_is_that_of_the_score():
    """Built from n·score, so it holds the score the row shows even when the task's
    score is not the mean of its per-sample consensus values."""
    acc = Accumulator().add_task(0.5, [1.0, 1.0, 1.0, 1.0])
    row = interval(acc)
    assert row.score == 0.5 and (row.ci_low, row.ci_high) == score_interval(2.0, 4)


def test_single_sample_has_no_spread_but_an_interval():
    row = interval(Accumulator().add_task(1.0, [1.0]))
    assert (row.score, row.stderr, row.ci_high) == (1.0, 0.0, 1.0)
    assert row.ci_low == pytest.approx(0.025)


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
    assert (agg.ci_low, agg.ci_high) == combined_interval(
        [(1.0, 0.8, 0.6, 1.0), (3.0, 0.4, 0.0, 0.8)]
    )


def test_an_aggregate_of_agreeing_samples_is_not_a_point():
    """Every sample right on two benchmarks: stderr 0, the interval still wide."""
    rows = [interval(Accumulator().add_task(1.0, [1.0] * n)) for n in (4, 8)]
    agg = weighted_aggregate([(1.0, rows[0]), (1.0, rows[1])])
    assert (agg.score, agg.stderr, agg.ci_high) == (1.0, 0.0, 1.0)
    assert 0.5 < agg.ci_low < 0.9


def test_overlap_flags():
    rows = [(0.9, 0.85, 0.95), (0.5, 0.4, 0.6), (0.55, 0.5, 0.65), (0.1, 0.0, 0.2)]
    assert overlapping(rows) == [False, True, True, False]


T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def part(weight, score, stderr, n_samples=4, n_tasks=1, minutes=0):
    low, high = max(0.0, score - Z95 * stderr), min(1.0, score + Z95 * stderr)  # any interval
    return BenchmarkPart(
        weight,
        Interval(score, stderr, low, high),
        n_samples,
        n_tasks,
        T0 + timedelta(minutes=minutes),
    )


def test_model_aggregate_of_every_active_benchmark_is_complete():
    parts = [part(1.0, 0.8, 0.1, 8, 2, minutes=5), part(3.0, 0.4, 0.2, 4, 1, minutes=1)]
    agg = model_aggregate(parts, n_active=2)
    assert agg.interval == weighted_aggregate([(1.0, parts[0].interval), (3.0, parts[1].interval)])
    assert (agg.n_samples, agg.n_tasks, agg.n_benchmarks) == (12, 3, 2)
    assert agg.updated_at == T0 + timedelta(minutes=5)
    assert agg.complete


def test_model_aggregate_does_not_depend_on_the_order_of_parts():
    parts = [part(1.0, 0.1, 0.01), part(2.0, 0.7, 0.03), part(0.5, 0.33, 0.02)]
    assert model_aggregate(parts, 3) == model_aggregate(parts[::-1], 3)


@pytest.mark.parametrize(
    ("weights", "n_active", "complete"),
    [
        ((1.0,), 2, False),  # measured on one of two active benchmarks
        ((1.0, 1.0), 2, True),
        ((0.0, 0.0), 2, False),  # no weight: not ranked
    ],
)
def test_model_aggregate_completeness(weights, n_active, complete):
    agg = model_aggregate([part(w, 0.5, 0.1) for w in weights], n_active)
    assert agg.complete is complete
    assert agg.n_benchmarks == len(weights)


def test_model_aggregate_without_weight_has_a_zero_interval():
    agg = model_aggregate([part(0.0, 0.9, 0.1)], 1)
    assert agg.interval == NO_INTERVAL and agg.n_samples == 4


def test_model_aggregate_needs_a_part():
    with pytest.raises(ValueError):
        model_aggregate([], 1)


def test_aggregate_basis_names_the_weights():
    basis = aggregate_basis({1: 1.0, 2: 1.0})
    assert len(basis) == 64 and int(basis, 16) >= 0
    assert aggregate_basis({2: 1.0, 1: 1.0}) == basis  # order does not matter
    assert aggregate_basis({2: 1, 1: 1}) == basis  # nor int vs float
    assert aggregate_basis({1: 1.0}) != basis
    assert aggregate_basis({1: 1.0, 3: 1.0}) != basis
    assert aggregate_basis({1: 1.0, 2: 2.0}) != basis
    assert aggregate_basis({}) != aggregate_basis({1: 1.0})
