"""Comparing scores: a model's score per subject, and whether intervals separate.

The model page breaks a benchmark's score down by the subject labels of its samples
(:func:`subject_scores`), and the compare page marks a row where the models' 95%
intervals do not all overlap (:func:`separated`). Both use the leaderboard's one
interval (``core/intervals.py``): a subject often has few samples, where
``mean ± 1.96·se`` would shrink to a point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from quorumbench.core.intervals import score_interval


@dataclass(frozen=True)
class SubjectScore:
    """A model's score on the samples of one subject, with its 95% interval."""

    subject: str
    score: float
    ci_low: float
    ci_high: float
    n_samples: int


def subject_scores(values: Mapping[str, Sequence[float]]) -> list[SubjectScore]:
    """Per subject, the mean of its per-sample scores (each in [0, 1], at least one per
    subject) with :func:`~quorumbench.core.intervals.score_interval`; most samples
    first, then by subject."""
    scores = []
    for subject, group in values.items():
        mean = sum(group) / len(group)
        low, high = score_interval(math.fsum(group), len(group))
        scores.append(SubjectScore(subject, mean, low, high, len(group)))
    scores.sort(key=lambda s: (-s.n_samples, s.subject))
    return scores


def separated(intervals: Sequence[tuple[float, float]]) -> bool:
    """Whether some pair of these (low, high) intervals does not overlap (touching
    ends overlap)."""
    return any(
        a_high < b_low or b_high < a_low
        for i, (a_low, a_high) in enumerate(intervals)
        for b_low, b_high in intervals[i + 1 :]
    )
