"""Which (model, benchmark) pairs get a task this epoch, under a compute budget.

Community compute is finite, so each epoch creates at most ``budget`` tasks. Pairs
are ranked, and the first ``budget`` win:

1. pairs with the fewest finalized samples (a new model is measured first);
2. then pairs whose confidence interval overlaps a rank neighbour's on that
   benchmark (more samples there can change the order people see);
3. then the widest intervals;
4. then model id and benchmark id, so the plan is deterministic.

Samples are compared in buckets of ``bucket`` (default one task's worth), so a pair
that is a few samples ahead does not lose all priority.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PairStats:
    """What the scheduler knows about one active (model, benchmark) pair."""

    model_id: int
    benchmark_id: int
    n_samples: int
    ci_width: float
    overlaps: bool


def plan_epoch(pairs: Sequence[PairStats], budget: int, bucket: int = 10) -> list[PairStats]:
    """The pairs to schedule this epoch, in priority order (at most ``budget``)."""
    if budget < 0 or bucket < 1:
        raise ValueError("budget must be non-negative and bucket positive")

    def key(p: PairStats) -> tuple[int, bool, float, int, int]:
        return (p.n_samples // bucket, not p.overlaps, -p.ci_width, p.model_id, p.benchmark_id)

    return sorted(pairs, key=key)[:budget]
