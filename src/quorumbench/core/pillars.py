"""Pillars: chance-corrected benchmark scores, pillar scores, and the aggregate over them.

Each active benchmark belongs to one of the five pillars (``core/taxonomy.py``). A
model's aggregate is built in three steps, every one a monotone or linear map of the
95% intervals below it, so each keeps an interval:

1. **Chance correction** (the Open LLM Leaderboard v2's normalisation): a benchmark
   row's raw score ``r`` becomes ``max(0, (r − c̄) / (1 − c̄))``, where ``c̄`` is the
   mean of the per-item chance levels (``Sample.chance``: 1/k for an item with k
   options, 0 for a generative one) of the items the row was scored on. Items with
   different numbers of options each bring their own level, instead of one fixed level
   for the whole benchmark. Applying the map to each 0/1 item separately would change
   nothing (0 stays 0, 1 stays 1): the correction is of the mean, whose chance baseline
   is ``c̄``. The interval's ends go through the same map (:func:`corrected`): it is
   non-decreasing, so it keeps their coverage; an interval wholly below chance becomes
   [0, 0] (the model is indistinguishable from guessing, or worse).
2. **Pillar score**: the weighted mean of the corrected scores of the pillar's active
   benchmarks (weights: the benchmarks' own ``weight``, 1 unless changed, so equal
   within a pillar), with the MOVER interval of ``core.intervals.combined_interval``.
   A pillar has a score only when the model was measured on every active benchmark of
   it with a positive weight.
3. **Aggregate**: the mean of the pillar scores weighted by the normalised pillar
   weights (seed 002's 0.35/0.20/0.15/0.20/0.20 sum to 1.10, so they become
   0.318/0.182/0.136/0.182/0.182), again with the MOVER interval. Nesting is
   consistent: a pillar's distances to its limits are already root-sum-of-squares,
   so the aggregate's equal those of one flat MOVER over every benchmark with weight
   (pillar weight × share in its pillar). The aggregate is *complete*, and ranked,
   only when every pillar with a positive weight has a score; the others are listed
   as missing.

:func:`rule_basis` names everything an aggregate depends on besides the rows (the
active benchmarks, their weights and pillars, the pillar weights), so a stored
aggregate is found out of date when any of them changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from quorumbench.core.leaderboard import NO_INTERVAL, Interval, aggregate_basis, weighted_aggregate
from quorumbench.core.taxonomy import PILLARS


def chance_corrected(raw: float, chance: float) -> float:
    """``max(0, (raw − chance) / (1 − chance))``: 0 at chance level, 1 at a perfect score."""
    if not 0.0 <= chance < 1.0:
        raise ValueError(f"a chance level is in [0, 1), not {chance}")
    return max(0.0, (raw - chance) / (1.0 - chance))


def corrected(raw: Interval, chance: float) -> Interval:
    """A row's score and 95% interval after chance correction (the same map on each end;
    the descriptive standard error scales by ``1 / (1 − chance)``)."""
    return Interval(
        chance_corrected(raw.score, chance),
        raw.stderr / (1.0 - chance),
        chance_corrected(raw.ci_low, chance),
        chance_corrected(raw.ci_high, chance),
    )


def mean_chance(chance_sum: float | None, n_samples: int) -> float | None:
    """The mean chance level of a row's ``n_samples`` items (None: not known)."""
    if chance_sum is None or n_samples <= 0:
        return None
    return min(max(chance_sum / n_samples, 0.0), 1.0)


@dataclass(frozen=True)
class AggregateRule:
    """What an aggregate is computed with, besides the rows.

    ``benchmarks``: each active benchmark's id → (weight, pillar or None);
    ``pillar_weights``: every pillar's weight, normalised to sum to 1.
    """

    benchmarks: Mapping[int, tuple[float, str | None]]
    pillar_weights: Mapping[str, float]

    def members(self, pillar: str) -> list[int]:
        """The pillar's active benchmarks that count (positive weight), by id."""
        return sorted(b for b, (w, p) in self.benchmarks.items() if p == pillar and w > 0)


def rule_basis(rule: AggregateRule) -> str:
    """``aggregate_basis`` of the rule: benchmark ids, weights, pillars and pillar weights."""
    return aggregate_basis(
        {b: w for b, (w, _) in rule.benchmarks.items()},
        pillars={b: p or "" for b, (_, p) in rule.benchmarks.items()},
        pillar_weights=rule.pillar_weights,
    )


@dataclass(frozen=True)
class MeasuredBenchmark:
    """A model's row on one active benchmark, as its aggregate sees it."""

    benchmark_id: int
    raw: Interval
    chance: float | None
    """The mean chance level of the row's items; None when not known (the row then
    counts as not measured for its pillar)."""
    n_samples: int
    n_tasks: int
    updated_at: datetime


@dataclass(frozen=True)
class PillarAggregate:
    """A model's pillar scores and the weighted aggregate over them."""

    interval: Interval
    """Over the pillars that have a score (all of them when ``complete``); zeros when
    none with a positive weight has one."""
    pillars: dict[str, Interval]
    """Each pillar with a score, in ``PILLARS`` order (also those of weight 0)."""
    missing: tuple[str, ...]
    """Pillars with a positive weight and no score, in ``PILLARS`` order."""
    n_samples: int
    n_tasks: int
    n_benchmarks: int
    updated_at: datetime

    @property
    def complete(self) -> bool:
        """Every pillar with a positive weight has a score: the aggregate is ranked."""
        return not self.missing


def pillar_scores(parts: Sequence[MeasuredBenchmark], rule: AggregateRule) -> dict[str, Interval]:
    """The corrected score and interval of each pillar whose counted benchmarks were all
    measured (with a known chance level)."""
    measured = {p.benchmark_id: corrected(p.raw, p.chance) for p in parts if p.chance is not None}
    scores = {}
    for pillar in PILLARS:
        members = rule.members(pillar)
        if members and all(b in measured for b in members):
            scores[pillar] = weighted_aggregate(
                [(rule.benchmarks[b][0], measured[b]) for b in members]
            )
    return scores


def pillar_aggregate(parts: Sequence[MeasuredBenchmark], rule: AggregateRule) -> PillarAggregate:
    """One model's aggregate from its rows on the active benchmarks; see the module
    docstring. Sums of samples and tasks and the latest update cover every part."""
    if not parts:
        raise ValueError("an aggregate needs at least one benchmark row")
    scores = pillar_scores(parts, rule)
    weighted = [(rule.pillar_weights.get(p, 0.0), s) for p, s in scores.items()]
    weighted = [(w, s) for w, s in weighted if w > 0]
    missing = tuple(p for p in PILLARS if rule.pillar_weights.get(p, 0.0) > 0 and p not in scores)
    return PillarAggregate(
        weighted_aggregate(weighted) if weighted else NO_INTERVAL,
        scores,
        missing,
        sum(p.n_samples for p in parts),
        sum(p.n_tasks for p in parts),
        len(parts),
        max(p.updated_at for p in parts),
    )
