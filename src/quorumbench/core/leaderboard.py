"""Leaderboard maths: incremental per-(model, benchmark) aggregates and intervals.

An :class:`Accumulator` holds running sums, so a finalized task updates its row in
O(1) instead of a recomputation over history:

* the score is the sample-weighted mean of finalized task scores,
  ``sum(score_t * n_t) / sum(n_t)`` (the mean of the per-sample consensus values
  when each task's score is the mean of its samples');
* its 95% interval is :func:`~quorumbench.core.intervals.score_interval` of the N
  samples summing to N·score (exact Clopper–Pearson limits, fractional for scores
  between 0 and 1);
* its standard error is descriptive only, ``sqrt(var / N)`` with
  ``var = (Q − S²/N) / (N − 1)`` over the per-sample consensus values (0 when they
  all agree); no interval is built from it.

:func:`weighted_aggregate` is a weighted mean of intervals: its interval combines the
parts' intervals (``core.intervals.combined_interval``, parts taken as independent);
its standard error, again descriptive, is ``sqrt(Σ w²·se²) / Σ w``. The server's
aggregate applies it twice, over the chance-corrected benchmarks of a pillar and over
the pillars (``core/pillars.py``). :func:`model_aggregate`, the aggregate of before
pillars (the weighted mean of every active benchmark's raw score, complete when
measured on all of them), stays for migrations 0002 and 0011, which compute it.
:func:`aggregate_basis` names the active benchmarks, their weights, pillars and the
pillar weights an aggregate was computed with, so a stored one can be found out of
date.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.intervals import combined_interval, score_interval


@dataclass(frozen=True)
class Accumulator:
    """Running sums of one (model, benchmark) leaderboard row."""

    n_tasks: int = 0
    n_samples: int = 0
    weighted_sum: float = 0.0
    sample_sum: float = 0.0
    sample_sumsq: float = 0.0

    def add_task(self, score: float, sample_scores: Sequence[float]) -> Accumulator:
        """The accumulator after one more finalized task."""
        n = len(sample_scores)
        if n == 0:
            raise ValueError("a finalized task has at least one sample")
        return Accumulator(
            self.n_tasks + 1,
            self.n_samples + n,
            self.weighted_sum + score * n,
            self.sample_sum + math.fsum(sample_scores),
            self.sample_sumsq + math.fsum(s * s for s in sample_scores),
        )


@dataclass(frozen=True)
class Interval:
    score: float
    stderr: float
    ci_low: float
    ci_high: float


def interval(acc: Accumulator) -> Interval:
    """Score, standard error and 95% interval of a leaderboard row."""
    if acc.n_samples == 0:
        raise ValueError("no finalized samples")
    n = acc.n_samples
    mean = acc.weighted_sum / n
    if n > 1:
        variance = max(0.0, (acc.sample_sumsq - acc.sample_sum**2 / n) / (n - 1))
        stderr = math.sqrt(variance / n)
    else:
        stderr = 0.0
    low, high = score_interval(acc.weighted_sum, n)
    return Interval(mean, stderr, low, high)


def weighted_aggregate(parts: Sequence[tuple[float, Interval]]) -> Interval:
    """Weighted mean of per-benchmark intervals, ``parts`` = (weight, interval).

    The interval combines the benchmarks' own (:func:`combined_interval`).
    """
    total = math.fsum(w for w, _ in parts)
    if not parts or total <= 0:
        raise ValueError("an aggregate needs positive weights")
    mean = math.fsum(w * i.score for w, i in parts) / total
    stderr = math.sqrt(math.fsum((w * i.stderr) ** 2 for w, i in parts)) / total
    low, high = combined_interval([(w, i.score, i.ci_low, i.ci_high) for w, i in parts])
    return Interval(mean, stderr, low, high)


@dataclass(frozen=True)
class BenchmarkPart:
    """A model's row on one active benchmark, as its aggregate sees it."""

    weight: float
    interval: Interval
    n_samples: int
    n_tasks: int
    updated_at: datetime


@dataclass(frozen=True)
class ModelAggregate:
    """A model's aggregate over the active benchmarks it was measured on."""

    interval: Interval
    n_samples: int
    n_tasks: int
    n_benchmarks: int
    updated_at: datetime
    complete: bool
    """Measured on every active benchmark (and with positive total weight): ranked."""


NO_INTERVAL = Interval(0.0, 0.0, 0.0, 0.0)


def model_aggregate(parts: Sequence[BenchmarkPart], n_active: int) -> ModelAggregate:
    """The aggregate of one model's rows on active benchmarks (``n_active`` of them).

    Sums of samples and tasks and the latest update cover every part; the interval is
    :func:`weighted_aggregate` of the parts, or zeros when their weights sum to zero
    (such an aggregate is not complete, so it is never ranked).
    """
    if not parts:
        raise ValueError("an aggregate needs at least one benchmark row")
    weighted = math.fsum(p.weight for p in parts) > 0
    return ModelAggregate(
        weighted_aggregate([(p.weight, p.interval) for p in parts]) if weighted else NO_INTERVAL,
        sum(p.n_samples for p in parts),
        sum(p.n_tasks for p in parts),
        len(parts),
        max(p.updated_at for p in parts),
        weighted and len(parts) == n_active,
    )


def aggregate_basis(
    weights: Mapping[int, float],
    *,
    pillars: Mapping[int, str] | None = None,
    pillar_weights: Mapping[str, float] | None = None,
) -> str:
    """A digest of the active benchmarks' ids and weights (64 hex characters), and of
    their pillars and the pillar weights when given (``core/pillars.py``).

    Two bases are equal exactly when all of these are, whatever the order they are
    given in. Without pillars the digest is the one of before pillars (migrations
    0002 and 0011 computed it so), which no aggregate with pillars has.
    """
    text = ";".join(f"{bench_id}:{float(w).hex()}" for bench_id, w in sorted(weights.items()))
    if pillars is not None or pillar_weights is not None:
        text += "|" + ";".join(f"{b}:{p}" for b, p in sorted((pillars or {}).items()))
        text += "|" + ";".join(
            f"{p}:{float(w).hex()}" for p, w in sorted((pillar_weights or {}).items())
        )
    return sha256_hex(text)


def overlapping(intervals: Sequence[tuple[float, float, float]]) -> list[bool]:
    """For (score, low, high) rows, whether each interval overlaps a rank neighbour's."""
    order = sorted(range(len(intervals)), key=lambda i: -intervals[i][0])
    flags = [False] * len(intervals)
    for above, below in zip(order, order[1:], strict=False):
        if intervals[below][2] >= intervals[above][1]:
            flags[above] = flags[below] = True
    return flags
