"""Scoring maths: multiple-choice metrics and run aggregates.

The multiple-choice definitions mirror lm-evaluation-harness:

* MC1 (``acc``): the prediction is the option with the highest log-likelihood; ties
  go to the earliest option, as ``numpy.argmax`` does. Correct when it is the gold.
* MC2: the probability mass of the true options, normalised over all options:
  ``sum(exp(ll_true)) / sum(exp(ll_all))``. lm-eval exponentiates the raw
  log-likelihoods; we subtract the maximum first, which gives the same number
  without underflowing to 0/0 on very long options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from quorumbench.core.intervals import score_interval


def argmax_first(values: Sequence[float]) -> int:
    """Index of the largest value; the first one wins a tie."""
    if not values:
        raise ValueError("argmax of an empty sequence")
    best = 0
    for index, value in enumerate(values):
        if value > values[best]:
            best = index
    return best


def mc1_correct(loglikelihoods: Sequence[float], gold: int = 0) -> bool:
    """MC1: is the gold option ranked first?"""
    return argmax_first(loglikelihoods) == gold


def mc2_score(loglikelihoods: Sequence[float], is_true: Sequence[bool]) -> float:
    """MC2: normalised probability mass on the true options, in [0, 1]."""
    if len(loglikelihoods) != len(is_true):
        raise ValueError("one truth label per option is needed")
    if not any(is_true):
        raise ValueError("MC2 needs at least one true option")
    peak = max(loglikelihoods)
    weights = [math.exp(ll - peak) for ll in loglikelihoods]
    total = math.fsum(weights)
    return math.fsum(w for w, t in zip(weights, is_true, strict=True) if t) / total


@dataclass(frozen=True)
class Aggregate:
    """Mean score of a run with its 95% interval (:func:`core.intervals.score_interval`,
    the leaderboard's own); ``stderr`` describes the samples and builds no interval."""

    mean: float
    n: int
    stderr: float
    ci_low: float
    ci_high: float


def aggregate(scores: Sequence[float]) -> Aggregate:
    """Mean, standard error and 95% interval of per-sample scores in [0, 1]: the same
    exact interval every leaderboard number carries, never a point for a few samples
    that agree."""
    n = len(scores)
    if n == 0:
        raise ValueError("no scores to aggregate")
    total = math.fsum(scores)
    mean = total / n
    if n > 1:
        variance = math.fsum((s - mean) ** 2 for s in scores) / (n - 1)
        stderr = math.sqrt(variance / n)
    else:
        stderr = 0.0
    low, high = score_interval(total, n)
    return Aggregate(mean, n, stderr, low, high)
