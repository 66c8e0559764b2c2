"""Quorum agreement between independent runners' results for one task.

The rule (defaults from DESIGN.md and the measurements in docs/server.md, all
configurable):

* A task needs ``quorum`` results from distinct accounts (never the model's owner;
  the caller enforces who may vote). Fewer results: the task stays ``PENDING``.
* **Per sample**, the consensus value is the median of the runners' scores for that
  sample: for 0/1 scores with an odd number of runners that is the majority; a tie
  between 0s and 1s gives 0.5, a sample nobody matches. Two scores of one sample
  *differ* when they lie more than ``epsilon`` apart (:data:`SAMPLE_EPSILON`, which
  matters only for fractional scores such as TruthfulQA-MC2's probability mass).
* A result is a *candidate* when the share of its samples that differ from the
  consensus vector is at most ``tolerance`` (a share of the task's samples, 0–1:
  with the default 0.2 and 5 samples, one sample may differ, two may not).
* The outer gate is the score rule of seed 000: among the candidates, the largest
  *cluster* of results whose task scores lie within ``threshold`` of each other
  (max − min ≤ threshold; ties go to the tighter cluster, then the lower one, so the
  verdict never depends on arrival order).
* ``DONE`` when that cluster holds at least ``min_agree`` results and more than half
  of all results; the task's score is the mean of the consensus vector, so the
  per-sample values the leaderboard keeps and the task score agree.
* Otherwise ``DISPUTED``: the caller re-queues the task with a larger quorum, up to a
  round limit, after which it stays visibly disputed.

Results outside a ``DONE`` cluster are *outliers*; their runners lose reputation.
The verdict records, per sample, the consensus value and the share of runners
whose score does not differ from it, and the ``tolerance`` and ``epsilon`` it was
reached with, so anyone can re-check it from the public log.

Votes without usable per-sample scores (vectors of different lengths, or empty)
are compared by their task scores alone (the cluster's median is the score), and
the verdict's ``tolerance`` is then ``None``: the rule before per-sample agreement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from quorumbench.protocol import TaskStatus

DEFAULT_TOLERANCE = 0.2
"""Share of a task's samples on which an agreeing result may differ from the
consensus: one of five, never two. Batch sizes 1/8/16 changed no per-sample score of
the bundled model on CPU; bfloat16 against float32 flipped one MC1 sample in 40
(docs/server.md, "Calibrating the tolerance")."""

SAMPLE_EPSILON = 0.01
"""How far apart two scores of one sample may lie and still be the same value.

0/1 scores differ by 1 or not at all, so any value below 0.5 treats them alike.
TruthfulQA-MC2's score is a probability mass computed from log-likelihoods rounded
to 4 decimals; a change of δ in every log-likelihood moves it by at most δ/2. Runs of
one model at batch sizes 1, 8 and 16 moved it by at most 3.4e-6; 0.01 absorbs
log-likelihood differences up to 0.02 and caps how far a runner can shade a sample
unnoticed (docs/server.md).
"""

_FUZZ = 1e-9


@dataclass(frozen=True)
class Vote:
    """One runner's result for a task."""

    result_id: int
    score: float
    sample_scores: tuple[float, ...]


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing the votes of one task."""

    status: TaskStatus
    score: float | None
    spread: float | None
    agreeing: tuple[int, ...]
    outliers: tuple[int, ...]
    sample_consensus: tuple[float, ...]
    sample_agreement: tuple[float, ...]
    tolerance: float | None = None
    """The per-sample tolerance applied; ``None`` when votes were compared by score only."""
    epsilon: float | None = None
    """Within this, two scores of one sample are the same value (with ``tolerance``)."""

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready fields (lists for the tuples)."""
        return {
            "status": self.status.value,
            "score": self.score,
            "spread": self.spread,
            "agreeing": list(self.agreeing),
            "outliers": list(self.outliers),
            "sample_consensus": list(self.sample_consensus),
            "sample_agreement": list(self.sample_agreement),
            "tolerance": self.tolerance,
            "epsilon": self.epsilon,
        }


def _largest_cluster(votes: Sequence[Vote], threshold: float) -> list[Vote]:
    ordered = sorted(votes, key=lambda v: (v.score, v.result_id))
    best: list[Vote] = []
    best_key: tuple[int, float, float] | None = None
    end = 0
    for start, low in enumerate(ordered):
        end = max(end, start)
        while end + 1 < len(ordered) and ordered[end + 1].score - low.score <= threshold + 1e-12:
            end += 1
        window = ordered[start : end + 1]
        key = (-len(window), window[-1].score - low.score, low.score)
        if best_key is None or key < best_key:
            best, best_key = window, key
    return best


def per_sample(
    votes: Sequence[Vote], epsilon: float = SAMPLE_EPSILON
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-sample consensus values (medians) and the share of votes within ``epsilon``
    of each; two empty tuples when the votes' sample vectors differ in length or are empty."""
    lengths = {len(v.sample_scores) for v in votes}
    if len(lengths) != 1 or lengths == {0}:
        return (), ()
    consensus = []
    agreement = []
    for column in zip(*(v.sample_scores for v in votes), strict=True):
        value = float(median(column))
        consensus.append(value)
        agreement.append(sum(1 for x in column if not _differs(x, value, epsilon)) / len(column))
    return tuple(consensus), tuple(agreement)


def _differs(x: float, value: float, epsilon: float) -> bool:
    return abs(x - value) > epsilon + _FUZZ


def differing_samples(
    sample_scores: Sequence[float], consensus: Sequence[float], epsilon: float = SAMPLE_EPSILON
) -> int:
    """How many of ``sample_scores`` lie more than ``epsilon`` from the consensus."""
    if len(sample_scores) != len(consensus):
        raise ValueError("a result and the consensus need one score per sample each")
    return sum(1 for x, c in zip(sample_scores, consensus, strict=True) if _differs(x, c, epsilon))


def within_tolerance(
    sample_scores: Sequence[float],
    consensus: Sequence[float],
    tolerance: float,
    epsilon: float = SAMPLE_EPSILON,
) -> bool:
    """Whether a result differs from the consensus vector on at most ``tolerance`` (a
    share, 0–1) of the samples; never when the two have different lengths or none."""
    if not consensus or len(sample_scores) != len(consensus):
        return False
    differing = differing_samples(sample_scores, consensus, epsilon)
    return differing <= tolerance * len(consensus) + _FUZZ


def check_rule(
    quorum: int = 3,
    min_agree: int = 3,
    threshold: float = 0.5,
    tolerance: float = DEFAULT_TOLERANCE,
    epsilon: float = SAMPLE_EPSILON,
) -> None:
    """Raise ``ValueError`` for parameters the rule cannot use."""
    if quorum < 1 or min_agree < 1 or threshold < 0:
        raise ValueError("quorum and min_agree must be positive, threshold non-negative")
    if not 0 <= tolerance <= 1 or not 0 <= epsilon < 0.5:
        raise ValueError("tolerance must lie in [0, 1] and epsilon in [0, 0.5)")


def quorum_verdict(
    votes: Sequence[Vote],
    *,
    quorum: int = 3,
    min_agree: int = 3,
    threshold: float = 0.5,
    tolerance: float = DEFAULT_TOLERANCE,
    epsilon: float = SAMPLE_EPSILON,
) -> Verdict:
    """Compare ``votes``; see the module docstring for the rule."""
    check_rule(quorum, min_agree, threshold, tolerance, epsilon)
    if len({v.result_id for v in votes}) != len(votes):
        raise ValueError("each vote needs a distinct result id")
    if len(votes) < quorum:
        return Verdict(TaskStatus.PENDING, None, None, (), (), (), ())
    spread = max(v.score for v in votes) - min(v.score for v in votes)
    consensus, agreement = per_sample(votes, epsilon)
    if consensus:
        candidates = [
            v for v in votes if within_tolerance(v.sample_scores, consensus, tolerance, epsilon)
        ]
        rule: tuple[float | None, float | None] = (tolerance, epsilon)
    else:
        candidates, rule = list(votes), (None, None)
    cluster = _largest_cluster(candidates, threshold)
    if len(cluster) >= min_agree and 2 * len(cluster) > len(votes):
        inside = {v.result_id for v in cluster}
        if consensus:
            score = math.fsum(consensus) / len(consensus)
        else:
            score = float(median(v.score for v in cluster))
        return Verdict(
            TaskStatus.DONE,
            score,
            spread,
            tuple(sorted(inside)),
            tuple(sorted(v.result_id for v in votes if v.result_id not in inside)),
            consensus,
            agreement,
            *rule,
        )
    return Verdict(TaskStatus.DISPUTED, None, spread, (), (), consensus, agreement, *rule)


def verdict_from_dict(fields: Mapping[str, Any]) -> Verdict:
    """The inverse of :meth:`Verdict.as_dict` (fields stored before the per-sample rule
    have no ``tolerance`` or ``epsilon``: they read as ``None``)."""
    return Verdict(
        TaskStatus(fields["status"]),
        fields["score"],
        fields["spread"],
        tuple(fields["agreeing"]),
        tuple(fields["outliers"]),
        tuple(fields["sample_consensus"]),
        tuple(fields["sample_agreement"]),
        fields.get("tolerance"),
        fields.get("epsilon"),
    )


def canary_passes(
    agreeing_scores: Sequence[float],
    score: float,
    threshold: float = 0.5,
    *,
    sample_scores: Sequence[float] = (),
    sample_consensus: Sequence[float] = (),
    tolerance: float | None = None,
    epsilon: float | None = None,
) -> bool:
    """Whether a canary result agrees with the settled answer of its task.

    A canary is a task that already reached consensus; the extra result passes when
    it would have joined the agreeing cluster, the rule every result of an open task
    is held to: the cluster's scores together with its score still lie within
    ``threshold`` of each other, and, when the verdict was reached with a per-sample
    ``tolerance``, its ``sample_scores`` differ from the settled ``sample_consensus``
    on at most that share of the samples (by more than ``epsilon``). A verdict
    without a tolerance (reached before the per-sample rule) is checked on scores only.
    """
    if not agreeing_scores:
        raise ValueError("a canary needs the agreeing scores of its settled task")
    scores = [*agreeing_scores, score]
    if max(scores) - min(scores) > threshold + 1e-12:
        return False
    if tolerance is None:
        return True
    eps = SAMPLE_EPSILON if epsilon is None else epsilon
    return within_tolerance(sample_scores, sample_consensus, tolerance, eps)
