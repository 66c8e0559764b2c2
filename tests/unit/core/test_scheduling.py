import pytest

from quorumbench.core.scheduling import PairStats, plan_epoch


def pair(m, b, n, width=0.1, overlaps=False):
    return PairStats(m, b, n, width, overlaps)


def test_fewest_samples_first_then_overlaps_then_width():
    pairs = [
        pair(1, 1, 100, 0.2),
        pair(2, 1, 0),
        pair(3, 1, 100, 0.1, overlaps=True),
        pair(4, 1, 100, 0.5),
        pair(5, 1, 105, 0.05, overlaps=True),  # same bucket as 100
    ]
    plan = plan_epoch(pairs, budget=4)
    assert [p.model_id for p in plan] == [2, 3, 5, 4]


def test_budget_caps_and_plan_is_deterministic():
    pairs = [pair(m, b, 0) for m in range(5) for b in range(2)]
    assert plan_epoch(pairs, 3) == plan_epoch(list(reversed(pairs)), 3)
    assert len(plan_epoch(pairs, 3)) == 3
    assert plan_epoch(pairs, 0) == []


def test_bad_arguments():
    with pytest.raises(ValueError):
        plan_epoch([], -1)
    with pytest.raises(ValueError):
        plan_epoch([], 1, bucket=0)
