"""Which (model, benchmark) pairs get a task this epoch, how deep, under a budget.

Community compute is finite, so an epoch spends at most ``sample_budget`` samples
(and creates at most ``task_budget`` tasks). Not every pair needs the same depth
(seed 000's "evaluation elasticity"): a model whose place on a benchmark is clear
gains little from more samples, while one whose interval overlaps a neighbour's, at
a rank people look at, needs many. :func:`depth_tiers` gives each ranked pair a
*tier*; tier ``t`` asks for up to ``tiers[t]`` samples per task (default 5, 25, 100):

* **tier 0** (shallow): a model not measured yet, or one whose interval overlaps
  neither rank neighbour's nor the top-k boundary (its place is settled);
* **tier 1**: its interval overlaps a rank neighbour's, or reaches across the top-k
  boundary (the line between rank ``top_k`` and ``top_k + 1``);
* **tier 2** (the top tier): as tier 1, and ranked within the top ``top_k``, where an
  order people act on (prizes, "the best model for …") is decided.

A task is never deeper than the evidence so far (:func:`task_depth`): a model with
5 samples gets a 5-sample task even in the top tier, one with 25 or more a 25-sample
task, one with 100 or more a 100-sample task. Depth grows with the evidence, so a
model's first noisy placement cannot buy it (or cost it) a deep task.

:func:`plan_epoch` then takes pairs in priority order while the budgets last:

1. pairs never measured (a new model is placed first);
2. then contested pairs before settled ones (tier 0 with samples comes last);
3. then the fewest samples relative to the pair's tier (``n_samples / tiers[tier]``:
   a top-tier pair keeps its turn until it has a few deep tasks' worth);
4. then overlapping pairs, the widest intervals, and model and benchmark id, so the
   plan is deterministic.

A pair whose task does not fit the samples left is skipped, and smaller ones after
it may still fit. With one tier every measured pair is "settled" and the order is
the fewest samples first: fixed depth, every model in turn.
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
    depth: int = 1
    """Samples its next task asks for (:func:`task_depth`)."""
    tier: int = 0
    tier_depth: int = 1
    """The samples its tier asks for once the evidence allows (``tiers[tier]``)."""


@dataclass(frozen=True)
class Ranked:
    """One model's row on one benchmark's board: its score and 95% interval."""

    model_id: int
    score: float
    ci_low: float
    ci_high: float


def _overlap(a: Ranked, b: Ranked) -> bool:
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high


def tier_at(
    position: int,
    row: Ranked,
    neighbours: Sequence[Ranked],
    boundary: tuple[Ranked, Ranked] | None,
    top_k: int,
    n_tiers: int = 3,
) -> int:
    """The tier of ``row`` at 0-based ``position`` on its board (see the module
    docstring), from its rank ``neighbours`` (the rows just above and below) and the
    ``boundary`` pair (the rows at ranks ``top_k`` and ``top_k + 1``), if there is one."""
    if top_k < 0 or n_tiers < 1:
        raise ValueError("top_k must be non-negative and n_tiers positive")
    contested = any(_overlap(row, other) for other in neighbours)
    if boundary is not None:
        inside, outside = boundary
        contested = contested or _overlap(row, outside if position < top_k else inside)
    if not contested:
        return 0
    return min(2 if position < top_k else 1, n_tiers - 1)


def depth_tiers(rows: Sequence[Ranked], top_k: int, n_tiers: int = 3) -> dict[int, int]:
    """Each model's tier on one benchmark's board (see the module docstring).

    Rows are ranked by score (best first; equal scores by model id). ``n_tiers`` caps
    the tiers: with one tier every model is shallow.
    """
    if top_k < 0 or n_tiers < 1:
        raise ValueError("top_k must be non-negative and n_tiers positive")
    order = board_order(rows)
    boundary = (order[top_k - 1], order[top_k]) if 0 < top_k < len(order) else None
    return {
        row.model_id: tier_at(
            position,
            row,
            order[max(0, position - 1) : position] + order[position + 1 : position + 2],
            boundary,
            top_k,
            n_tiers,
        )
        for position, row in enumerate(order)
    }


def board_order(rows: Sequence[Ranked]) -> list[Ranked]:
    """Best first; equal scores by model id (the order tiers are decided in)."""
    return sorted(rows, key=lambda r: (-r.score, r.model_id))


def task_depth(tier: int, n_samples: int, tiers: Sequence[int]) -> int:
    """The samples of a pair's next task: its tier's depth, but no deeper than the
    largest tier its evidence so far (``n_samples``, at least the shallow depth) reaches."""
    if not tiers or tier < 0 or tier >= len(tiers):
        raise ValueError("tier must index tiers")
    reached = [depth for depth in tiers if depth <= max(n_samples, tiers[0])]
    return min(tiers[tier], max(reached))


@dataclass(frozen=True)
class Budget:
    """What one epoch may spend."""

    tasks: int
    samples: int


def plan_epoch(
    pairs: Sequence[PairStats], budget: int | Budget, bucket: int = 10
) -> list[PairStats]:
    """The pairs to schedule this epoch, in priority order, within ``budget``.

    A plain number is a task budget (every task then counts, whatever its depth).
    """
    limits = budget if isinstance(budget, Budget) else Budget(budget, 2**62)
    if limits.tasks < 0 or limits.samples < 0 or bucket < 1:
        raise ValueError("budgets must be non-negative and bucket positive")

    def key(p: PairStats) -> tuple[bool, bool, int, bool, float, int, int]:
        return (
            p.n_samples > 0,
            p.tier == 0 and p.n_samples > 0,
            p.n_samples // max(bucket, p.tier_depth),
            not p.overlaps,
            -p.ci_width,
            p.model_id,
            p.benchmark_id,
        )

    plan: list[PairStats] = []
    samples = 0
    for pair in sorted(pairs, key=key):
        if len(plan) >= limits.tasks:
            break
        if samples + pair.depth > limits.samples:
            continue
        plan.append(pair)
        samples += pair.depth
    return plan
