"""Chance correction, pillar scores and the weighted aggregate over pillars."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from quorumbench.core.intervals import combined_interval
from quorumbench.core.leaderboard import NO_INTERVAL, Interval, aggregate_basis
from quorumbench.core.pillars import (
    AggregateRule,
    MeasuredBenchmark,
    chance_corrected,
    corrected,
    mean_chance,
    pillar_aggregate,
    pillar_scores,
    rule_basis,
)
from quorumbench.core.taxonomy import SEED_PILLAR_WEIGHTS, normalised_weights

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SEED = normalised_weights(SEED_PILLAR_WEIGHTS)


@pytest.mark.parametrize(
    ("raw", "chance", "expected"),
    [
        (0.25, 0.25, 0.0),  # guessing among four options
        (1.0, 0.25, 1.0),
        (0.625, 0.25, 0.5),
        (0.1, 0.25, 0.0),  # below chance: clamped at 0
        (0.4, 0.0, 0.4),  # generative: unchanged
    ],
)
def test_chance_correction(raw, chance, expected):
    assert chance_corrected(raw, chance) == pytest.approx(expected)


@pytest.mark.parametrize("chance", [-0.1, 1.0, 1.5])
def test_a_chance_level_is_below_one(chance):
    with pytest.raises(ValueError, match="chance level"):
        chance_corrected(0.5, chance)


def test_chance_is_the_mean_of_the_items_own_levels():
    """MMLU-Pro's complaint: items with 4, 10 and 2 options are not all at 1/10."""
    levels = [1 / 4, 1 / 10, 1 / 2, 1 / 4]
    chance = mean_chance(sum(levels), len(levels))
    assert chance == pytest.approx(0.275)
    # a random guesser's expected raw score is exactly that mean: it corrects to 0
    assert chance_corrected(sum(levels) / len(levels), chance) == pytest.approx(0.0)
    # per item, the map on a 0/1 score changes nothing: 0 stays 0 and 1 stays 1
    assert [chance_corrected(s, c) for s, c in zip([0, 1, 1, 0], levels, strict=True)] == [
        0,
        1,
        1,
        0,
    ]
    assert mean_chance(None, 4) is None and mean_chance(1.0, 0) is None


def test_the_interval_ends_take_the_same_map():
    raw = Interval(0.5, 0.1, 0.2, 0.8)
    out = corrected(raw, 0.25)
    assert out.score == pytest.approx(1 / 3)
    assert (out.ci_low, out.ci_high) == (0.0, pytest.approx(0.55 / 0.75))
    assert out.stderr == pytest.approx(0.1 / 0.75)
    assert corrected(raw, 0.0) == raw


def weights(**pillars: float) -> dict[str, float]:
    return normalised_weights({p: pillars.get(p, 0.0) for p in SEED})


def test_seed_weights_are_normalised():
    assert sum(SEED.values()) == pytest.approx(1.0)
    assert [round(SEED[p], 3) for p in SEED] == [0.318, 0.182, 0.136, 0.182, 0.182]


def part(bench_id, score, low, high, chance=0.0, n=10):
    return MeasuredBenchmark(bench_id, Interval(score, 0.05, low, high), chance, n, 1, T0)


FIVE = {1: (1.0, "reasoning"), 2: (1.0, "reasoning"), 3: (1.0, "coding"), 4: (1.0, "math")}
FIVE |= {5: (1.0, "language"), 6: (1.0, "safety")}


def test_pillar_scores_are_means_of_corrected_scores():
    rule = AggregateRule(FIVE, SEED)
    parts = [part(1, 0.625, 0.4, 0.8, chance=0.25), part(2, 0.5, 0.3, 0.7)]
    (reasoning,) = pillar_scores(parts, rule).items()
    assert reasoning[0] == "reasoning"
    first = corrected(parts[0].raw, 0.25)
    assert reasoning[1].score == pytest.approx((first.score + 0.5) / 2)
    assert (reasoning[1].ci_low, reasoning[1].ci_high) == pytest.approx(
        combined_interval([(1, first.score, first.ci_low, first.ci_high), (1, 0.5, 0.3, 0.7)])
    )


def test_a_pillar_needs_every_one_of_its_benchmarks():
    rule = AggregateRule(FIVE, SEED)
    assert pillar_scores([part(1, 0.5, 0.3, 0.7)], rule) == {}  # 2 is missing
    # a row whose chance level is not known counts as not measured
    assert pillar_scores([part(3, 0.5, 0.3, 0.7, chance=None)], rule) == {}


def test_benchmark_weights_count_within_a_pillar():
    rule = AggregateRule({**FIVE, 2: (3.0, "reasoning")}, SEED)
    scores = pillar_scores([part(1, 0.2, 0.1, 0.3), part(2, 0.6, 0.5, 0.7)], rule)
    assert scores["reasoning"].score == pytest.approx((0.2 + 3 * 0.6) / 4)
    # a weight of 0 takes a benchmark out of its pillar
    rule = AggregateRule({**FIVE, 2: (0.0, "reasoning")}, SEED)
    assert pillar_scores([part(1, 0.2, 0.1, 0.3)], rule)["reasoning"].score == 0.2


def every_pillar():
    return [part(b, 0.1 * b, 0.1 * b - 0.05, 0.1 * b + 0.05) for b in range(1, 7)]


def test_the_aggregate_weights_the_pillars():
    rule = AggregateRule(FIVE, SEED)
    agg = pillar_aggregate(every_pillar(), rule)
    assert agg.complete and agg.missing == ()
    pillar = {"reasoning": 0.15, "coding": 0.3, "math": 0.4, "language": 0.5, "safety": 0.6}
    assert agg.interval.score == pytest.approx(sum(SEED[p] * s for p, s in pillar.items()))
    assert (agg.n_samples, agg.n_tasks, agg.n_benchmarks) == (60, 6, 6)
    # nesting is one flat MOVER with weight (pillar weight x share in the pillar)
    flat = [
        (SEED[FIVE[p.benchmark_id][1]] / (2 if p.benchmark_id < 3 else 1), p.raw)
        for p in every_pillar()
    ]
    low, high = combined_interval([(w, i.score, i.ci_low, i.ci_high) for w, i in flat])
    assert (agg.interval.ci_low, agg.interval.ci_high) == pytest.approx((low, high))
    assert agg.interval.ci_low < agg.interval.score < agg.interval.ci_high


def test_missing_pillars_leave_a_model_unranked():
    rule = AggregateRule(FIVE, SEED)
    parts = [p for p in every_pillar() if p.benchmark_id not in (3, 6)]
    agg = pillar_aggregate(parts, rule)
    assert not agg.complete and agg.missing == ("coding", "safety")
    assert set(agg.pillars) == {"reasoning", "math", "language"}
    # its score is the weighted mean of the pillars it has (shown, never ranked)
    have = {"reasoning": 0.15, "math": 0.4, "language": 0.5}
    total = sum(SEED[p] for p in have)
    assert agg.interval.score == pytest.approx(sum(SEED[p] * s for p, s in have.items()) / total)


def test_a_pillar_of_weight_zero_is_not_needed_but_still_scored():
    rule = AggregateRule(FIVE, weights(math=1.0))
    agg = pillar_aggregate([part(4, 0.4, 0.3, 0.5), part(3, 0.9, 0.8, 1.0)], rule)
    assert agg.complete and agg.interval.score == pytest.approx(0.4)
    assert set(agg.pillars) == {"math", "coding"}
    # a pillar without any benchmark, weighted, is missing for everybody
    rule = AggregateRule({4: (1.0, "math")}, weights(math=1.0, safety=1.0))
    agg = pillar_aggregate([part(4, 0.4, 0.3, 0.5)], rule)
    assert agg.missing == ("safety",) and agg.interval.score == pytest.approx(0.4)


def test_no_weighted_pillar_gives_zeros():
    rule = AggregateRule(FIVE, weights(math=1.0))
    agg = pillar_aggregate([part(3, 0.9, 0.8, 1.0)], rule)
    assert agg.interval == NO_INTERVAL and agg.missing == ("math",)
    with pytest.raises(ValueError, match="at least one"):
        pillar_aggregate([], rule)


def test_the_basis_names_benchmarks_weights_pillars_and_pillar_weights():
    rule = AggregateRule(FIVE, SEED)
    basis = rule_basis(rule)
    assert basis == rule_basis(AggregateRule(dict(reversed(FIVE.items())), SEED))
    assert basis != rule_basis(AggregateRule({**FIVE, 6: (1.0, "language")}, SEED))  # pillar
    assert basis != rule_basis(AggregateRule({**FIVE, 6: (2.0, "safety")}, SEED))  # weight
    assert basis != rule_basis(AggregateRule({**FIVE, 7: (1.0, "safety")}, SEED))  # benchmark
    assert basis != rule_basis(AggregateRule(FIVE, weights(math=1.0)))  # pillar weights
    # never the basis of before pillars (migrations 0002 and 0011 wrote those)
    assert basis != aggregate_basis({b: w for b, (w, _) in FIVE.items()})
    assert rule_basis(AggregateRule({1: (1.0, None)}, SEED)) != rule_basis(
        AggregateRule({1: (1.0, "math")}, SEED)
    )
    assert math.isclose(sum(SEED.values()), 1.0)
