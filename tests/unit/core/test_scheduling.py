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


# --- depth tiers ----------------------------------------------------------------------

from quorumbench.core.scheduling import (  # noqa: E402
    Budget,
    Ranked,
    depth_tiers,
    task_depth,
    tier_at,
)


def ranked(model_id, score, half=0.05):
    return Ranked(model_id, score, score - half, score + half)


def test_separated_models_stay_shallow_and_contested_ones_go_deeper():
    rows = [
        ranked(1, 0.95, 0.01),  # alone at the top
        ranked(2, 0.70, 0.04),  # overlaps 3
        ranked(3, 0.66, 0.04),
        ranked(4, 0.30, 0.02),  # alone at the bottom
    ]
    assert depth_tiers(rows, top_k=1) == {1: 0, 2: 1, 3: 1, 4: 0}
    # with a top 3, the contested pair is where the order people act on is decided
    assert depth_tiers(rows, top_k=3) == {1: 0, 2: 2, 3: 2, 4: 0}


def test_the_top_k_boundary_is_contested_from_both_sides():
    rows = [ranked(1, 0.9, 0.01), ranked(2, 0.6, 0.06), ranked(3, 0.5, 0.06), ranked(4, 0.1)]
    # 2 and 3 overlap across the line between rank 2 and rank 3 (top_k = 2)
    assert depth_tiers(rows, top_k=2) == {1: 0, 2: 2, 3: 1, 4: 0}
    # rank 2's interval also reaches the boundary model when they are not neighbours
    wide = [ranked(1, 0.9, 0.01), ranked(2, 0.7, 0.25), ranked(5, 0.65, 0.01), ranked(3, 0.5)]
    assert depth_tiers(wide, top_k=1)[2] == 1
    assert depth_tiers(wide, top_k=2)[3] == 1  # rank 4 overlaps rank 2 across the line


def test_tiers_are_capped_and_ties_break_by_model_id():
    rows = [ranked(2, 0.5), ranked(1, 0.5)]
    assert depth_tiers(rows, top_k=5, n_tiers=1) == {1: 0, 2: 0}
    assert depth_tiers(rows, top_k=5, n_tiers=2) == {1: 1, 2: 1}
    assert depth_tiers([], top_k=3) == {}
    assert depth_tiers([ranked(7, 0.5)], top_k=0) == {7: 0}
    with pytest.raises(ValueError):
        depth_tiers(rows, top_k=-1)
    with pytest.raises(ValueError):
        depth_tiers(rows, top_k=1, n_tiers=0)


@pytest.mark.parametrize(
    ("tier", "n", "expected"),
    [(0, 0, 5), (2, 0, 5), (2, 24, 5), (1, 25, 25), (2, 99, 25), (2, 100, 100), (1, 500, 25)],
)
def test_a_task_is_never_deeper_than_the_evidence(tier, n, expected):
    assert task_depth(tier, n, (5, 25, 100)) == expected


def test_task_depth_needs_a_tier_it_has():
    with pytest.raises(ValueError):
        task_depth(3, 10, (5, 25, 100))
    with pytest.raises(ValueError):
        task_depth(0, 10, ())


def deep(m, n, tier, depth, width=0.1):
    return PairStats(
        m, 1, n, width, tier > 0, depth=depth, tier=tier, tier_depth=(5, 25, 100)[tier]
    )


def test_the_sample_budget_is_spent_new_then_contested_then_settled():
    pairs = [
        deep(1, 200, 0, 5),  # settled
        deep(2, 0, 0, 5),  # new
        deep(3, 100, 2, 100),  # contested at the top, a deep task
        deep(4, 30, 1, 25),  # contested
        deep(5, 40, 1, 25),
    ]
    plan = plan_epoch(pairs, Budget(tasks=10, samples=135), bucket=5)
    # 5 + 100 + 25: model 5's task (25 more) does not fit, the settled one's 5 does
    assert [p.model_id for p in plan] == [2, 3, 4, 1]
    everything = plan_epoch(pairs, Budget(tasks=10, samples=10_000), bucket=5)
    assert [p.model_id for p in everything] == [2, 3, 4, 5, 1]
    assert [p.model_id for p in plan_epoch(pairs, Budget(2, 10_000), bucket=5)] == [2, 3]


def test_a_deep_task_that_does_not_fit_lets_smaller_ones_in():
    pairs = [deep(1, 100, 2, 100), deep(2, 30, 1, 25), deep(3, 5, 1, 5)]
    plan = plan_epoch(pairs, Budget(tasks=10, samples=30), bucket=5)
    assert [p.model_id for p in plan] == [3, 2]


def test_a_top_tier_pair_keeps_its_turn_by_deep_tasks_worth_of_samples():
    # counted in tasks of its own tier: 120 samples is one deep task, 50 two middle ones
    pairs = [deep(1, 50, 1, 25), deep(2, 120, 2, 100)]
    assert [p.model_id for p in plan_epoch(pairs, Budget(5, 1000), bucket=5)] == [2, 1]


def test_budgets_must_be_sane():
    with pytest.raises(ValueError):
        plan_epoch([], Budget(1, -1))


@pytest.mark.parametrize(
    ("top_k", "n_tiers"),
    [pytest.param(-1, 3, id="a negative top k"), pytest.param(1, 0, id="no tiers")],
)
def test_a_single_rows_tier_needs_a_sane_top_k_and_tier_count(top_k, n_tiers):
    row = ranked(1, 0.5)
    with pytest.raises(ValueError) as raised:
        tier_at(0, row, [ranked(2, 0.5)], None, top_k, n_tiers)
    assert str(raised.value) == "top_k must be non-negative and n_tiers positive"
