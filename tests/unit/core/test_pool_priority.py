"""core/pool_priority.py: the reserve split by funds, pools' pairs first within it, the
rest by plan_epoch, never over budget, and exactly plan_epoch without pools."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.pool_priority import PoolClaim, plan_with_pools, split_reserve
from quorumbench.core.scheduling import Budget, PairStats, plan_epoch


def pair(model: int, bench: int = 1, n: int = 0, depth: int = 5) -> PairStats:
    return PairStats(model, bench, n, 1.0 if n == 0 else 0.2, False, depth=depth)


def keys(plan):
    return [(p.model_id, p.benchmark_id) for p in plan]


def test_split_reserve_by_funds_with_largest_remainders():
    claims = [PoolClaim(1, 100, frozenset()), PoolClaim(2, 200, frozenset())]
    assert split_reserve(10, claims) == {1: 3, 2: 7}  # 3.33 and 6.67: the larger remainder
    assert split_reserve(0, claims) == {1: 0, 2: 0}
    even = [PoolClaim(5, 50, frozenset()), PoolClaim(3, 50, frozenset())]
    assert split_reserve(3, even) == {5: 1, 3: 2}  # equal funds and remainders: lower id
    assert split_reserve(4, [PoolClaim(1, 0, frozenset())]) == {1: 0}
    with pytest.raises(ValueError, match="non-negative"):
        split_reserve(-1, claims)


def test_a_pools_pairs_come_first_when_the_budget_is_tight():
    # models 1-4 never measured (they would go first by plan_epoch's order), model 9
    # measured already, but it is the pool's entry
    pairs = [pair(m) for m in (1, 2, 3, 4)] + [pair(9, n=40)]
    pool = PoolClaim(7, 1000, frozenset({(9, 1)}))
    plain = plan_epoch(pairs, Budget(2, 100), 10)
    assert (9, 1) not in keys(plain)
    plan = plan_with_pools(pairs, Budget(2, 100), 10, [pool], 0.5)
    assert keys(plan) == [(9, 1), (1, 1)]  # the pool's pair first, then plan_epoch's order


def test_richer_pools_first_and_a_shared_pair_counts_once():
    pairs = [pair(m) for m in (1, 2, 3, 4, 5, 6)]
    rich = PoolClaim(1, 3000, frozenset({(5, 1), (6, 1)}))
    poor = PoolClaim(2, 1000, frozenset({(6, 1), (4, 1)}))
    plan = plan_with_pools(pairs, Budget(4, 100), 10, [poor, rich], 1.0)
    # reserve 4 tasks: rich 3, poor 1; rich takes 5 and 6, poor takes 4 (6 is taken)
    assert keys(plan)[:3] == [(5, 1), (6, 1), (4, 1)]
    assert len(plan) == 4 and keys(plan)[3] == (1, 1)


def test_a_pair_over_its_pools_samples_waits_for_the_rest_and_nothing_goes_over():
    pairs = [pair(1, depth=25), pair(2, depth=5), pair(3, depth=5)]
    pool = PoolClaim(1, 10, frozenset({(1, 1), (2, 1)}))
    plan = plan_with_pools(pairs, Budget(10, 30), 10, [pool], 0.5)  # pool: 15 samples
    assert keys(plan)[0] == (2, 1)  # 25 does not fit the pool's 15: skipped there
    assert sum(p.depth for p in plan) <= 30
    assert set(keys(plan)) == {(2, 1), (1, 1)}  # then 1 fits what is left (25), 3 does not


def test_the_share_is_read_as_written():
    others = [pair(m) for m in range(1, 101)]  # ranked first by plan_epoch (lower ids)
    entries = [pair(m) for m in range(101, 201)]
    pool = PoolClaim(1, 10, frozenset((m, 1) for m in range(101, 201)))
    plan = plan_with_pools(others + entries, Budget(100, 10_000), 10, [pool], 0.29)
    assert sum(p.model_id > 100 for p in plan) == 29  # 0.29 × 100 is 29, not 28.999…


def test_bad_arguments():
    pool = PoolClaim(1, 10, frozenset())
    for share in (-0.1, 1.5):
        with pytest.raises(ValueError, match="share"):
            plan_with_pools([], Budget(1, 1), 10, [pool], share)
    with pytest.raises(ValueError, match="funds"):
        plan_with_pools([], Budget(1, 1), 10, [PoolClaim(1, -1, frozenset())], 0.5)
    with pytest.raises(ValueError, match="unique"):
        plan_with_pools([], Budget(1, 1), 10, [pool, pool], 0.5)
    with pytest.raises(ValueError, match="budgets"):
        plan_with_pools([], Budget(-1, 1), 10, [pool], 0.5)


pairs_strategy = st.lists(
    st.builds(
        pair,
        st.integers(1, 12),
        st.integers(1, 3),
        st.sampled_from([0, 5, 30, 120]),
        st.sampled_from([5, 25, 100]),
    ),
    max_size=25,
    unique_by=lambda p: (p.model_id, p.benchmark_id),
)


@st.composite
def claims_strategy(draw, pairs):
    keys_ = [(p.model_id, p.benchmark_id) for p in pairs]
    n = draw(st.integers(0, 3))
    return [
        PoolClaim(
            i,
            draw(st.integers(0, 5000)),
            frozenset(draw(st.lists(st.sampled_from(keys_))) if keys_ else []),
        )
        for i in range(1, n + 1)
    ]


@given(pairs_strategy, st.integers(0, 12), st.integers(0, 400), st.floats(0, 1), st.data())
def test_properties(pairs, tasks, samples, share, data):
    claims = data.draw(claims_strategy(pairs))
    budget = Budget(tasks, samples)
    plan = plan_with_pools(pairs, budget, 10, claims, share)
    assert len(plan) <= tasks and sum(p.depth for p in plan) <= samples
    assert len(set(keys(plan))) == len(plan)  # each pair once
    assert plan_with_pools(pairs, budget, 10, [], share) == plan_epoch(pairs, budget, 10)
    assert plan_with_pools(pairs, budget, 10, claims, 0.0) == plan_epoch(pairs, budget, 10)
    # the input order changes nothing
    assert plan_with_pools(list(reversed(pairs)), budget, 10, claims, share) == plan
    # a pool's pair is never dropped while the pool's reserve had room for it
    task_parts = split_reserve(int(tasks * share), claims)
    sample_parts = split_reserve(int(samples * share), claims)
    chosen = set(keys(plan))
    for claim in claims:
        if task_parts[claim.pool_id] >= len(claim.pairs) and sample_parts[claim.pool_id] >= sum(
            p.depth for p in pairs if (p.model_id, p.benchmark_id) in claim.pairs
        ):
            assert claim.pairs & set(keys(pairs)) <= chosen
