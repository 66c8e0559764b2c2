"""Prize-pool pairs first, within the epoch's budget, in proportion to the funds at stake.

A pool's board counts the epoch tasks of its entries on its benchmarks; an entry whose
(model, benchmark) pair misses an epoch because the budget ran out is scored on fewer
epochs. :func:`plan_with_pools` therefore reserves part of each epoch's budget for the
running pools' pairs before the ordinary plan (``core/scheduling.plan_epoch``) takes
the rest:

1. A fraction ``share`` (``QB_POOL_BUDGET_SHARE``, read as the decimal it is written
   as) of the epoch's task budget and of its sample budget (each rounded down) is
   reserved for pools.
2. The reserve is split among the pools (:class:`PoolClaim`) in proportion to their
   funds: each gets the integer part of ``reserve × funds / total funds``, and what the
   integer parts leave goes one unit each to the largest remainders (ties: the richer
   pool, then the lower pool id). A pool with no funds gets nothing reserved.
3. Pools take their part in order, richest first (ties: lower pool id). Each takes its
   pairs in ``plan_epoch``'s own order (never measured first, then contested, then the
   fewest samples…) while its part of tasks and samples lasts; a pair that does not fit
   is skipped, and smaller ones after it may still fit. A pair in several pools is
   counted once, by the first (richest) pool whose part it fits.
4. Every pair not taken yet, pool pairs that did not fit included, is then planned by
   ``plan_epoch`` within what is left of the whole budget: the reserve a pool did not
   use goes back to everyone.

The result is in lease priority order: the pools' pairs (richest pool first), then the
rest. With no pools, or ``share`` 0, it is exactly ``plan_epoch``'s plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from quorumbench.core.scheduling import Budget, PairStats, plan_epoch


@dataclass(frozen=True)
class PoolClaim:
    """A running pool: its funds (minor units) and its (model id, benchmark id) pairs."""

    pool_id: int
    funds: int
    pairs: frozenset[tuple[int, int]]


def split_reserve(total: int, claims: Sequence[PoolClaim]) -> dict[int, int]:
    """``total`` units split among ``claims`` by funds (module docstring, step 2)."""
    if total < 0:
        raise ValueError("the reserve must be non-negative")
    funds = sum(c.funds for c in claims)
    if funds <= 0 or total == 0:
        return {c.pool_id: 0 for c in claims}
    parts = {c.pool_id: total * c.funds // funds for c in claims}
    left = total - sum(parts.values())
    by_remainder = sorted(claims, key=lambda c: (-(total * c.funds % funds), -c.funds, c.pool_id))
    for claim in by_remainder[:left]:
        parts[claim.pool_id] += 1
    return parts


def _check(claims: Sequence[PoolClaim], share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError("share must be between 0 and 1")
    if any(c.funds < 0 for c in claims):
        raise ValueError("a pool's funds must be non-negative")
    if len({c.pool_id for c in claims}) != len(claims):
        raise ValueError("pool ids must be unique")


def plan_with_pools(
    pairs: Sequence[PairStats],
    budget: Budget,
    bucket: int,
    claims: Sequence[PoolClaim],
    share: float,
) -> list[PairStats]:
    """The epoch's plan with the pools' reserve first (module docstring)."""
    _check(claims, share)
    if budget.tasks < 0 or budget.samples < 0:
        raise ValueError("budgets must be non-negative")
    order = plan_epoch(pairs, Budget(len(pairs), 2**62), bucket)  # plan_epoch's ranking
    fraction = Fraction(str(share))  # as written: 0.29 of 100 is 29, not 28.999…
    tasks = split_reserve(int(budget.tasks * fraction), claims)
    samples = split_reserve(int(budget.samples * fraction), claims)
    first: list[PairStats] = []
    taken: set[tuple[int, int]] = set()
    for claim in sorted(claims, key=lambda c: (-c.funds, c.pool_id)):
        n_tasks, n_samples = tasks[claim.pool_id], samples[claim.pool_id]
        for pair in order:
            key = (pair.model_id, pair.benchmark_id)
            if n_tasks <= 0:
                break
            if key in taken or key not in claim.pairs or pair.depth > n_samples:
                continue
            first.append(pair)
            taken.add(key)
            n_tasks -= 1
            n_samples -= pair.depth
    rest = [p for p in pairs if (p.model_id, p.benchmark_id) not in taken]
    left = Budget(budget.tasks - len(first), budget.samples - sum(p.depth for p in first))
    return first + plan_epoch(rest, left, bucket)
