"""Quorum agreement between independent runners' results for one task.

The rule (defaults from DESIGN.md, all configurable):

* A task needs ``quorum`` results from distinct accounts (never the model's owner;
  the caller enforces who may vote). Fewer results: the task stays ``PENDING``.
* Sort the scores and find the largest *cluster*: the most results whose scores lie
  within ``threshold`` of each other (max − min ≤ threshold). Ties go to the tighter
  cluster, then the lower one, so the verdict never depends on arrival order.
* ``DONE`` when that cluster holds at least ``min_agree`` results and more than half
  of all results; the task's score is the cluster's median. In the first round
  (``quorum == min_agree == 3``) this is exactly "max − min ≤ threshold".
* Otherwise ``DISPUTED``: the caller re-queues the task with a larger quorum, up to a
  round limit, after which it stays visibly disputed.

Results outside a ``DONE`` cluster are *outliers*; their runners lose reputation.
Per sample, the consensus value is the median of the runners' per-sample scores
(the majority for 0/1 scores) and the agreement is the share of runners that match it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, Literal

Status = Literal["PENDING", "DONE", "DISPUTED"]


@dataclass(frozen=True)
class Vote:
    """One runner's result for a task."""

    result_id: int
    score: float
    sample_scores: tuple[float, ...]


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing the votes of one task."""

    status: Status
    score: float | None
    spread: float | None
    agreeing: tuple[int, ...]
    outliers: tuple[int, ...]
    sample_consensus: tuple[float, ...]
    sample_agreement: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready fields (lists for the tuples)."""
        return {
            "status": self.status,
            "score": self.score,
            "spread": self.spread,
            "agreeing": list(self.agreeing),
            "outliers": list(self.outliers),
            "sample_consensus": list(self.sample_consensus),
            "sample_agreement": list(self.sample_agreement),
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


def per_sample(votes: Sequence[Vote]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-sample consensus values (medians) and agreement shares across votes."""
    lengths = {len(v.sample_scores) for v in votes}
    if len(lengths) != 1:
        return (), ()
    consensus = []
    agreement = []
    for column in zip(*(v.sample_scores for v in votes), strict=True):
        value = float(median(column))
        consensus.append(value)
        agreement.append(sum(1 for x in column if abs(x - value) <= 1e-9) / len(column))
    return tuple(consensus), tuple(agreement)


def quorum_verdict(
    votes: Sequence[Vote],
    *,
    quorum: int = 3,
    min_agree: int = 3,
    threshold: float = 0.5,
) -> Verdict:
    """Compare ``votes``; see the module docstring for the rule."""
    if quorum < 1 or min_agree < 1 or threshold < 0:
        raise ValueError("quorum and min_agree must be positive, threshold non-negative")
    if len({v.result_id for v in votes}) != len(votes):
        raise ValueError("each vote needs a distinct result id")
    if len(votes) < quorum:
        return Verdict("PENDING", None, None, (), (), (), ())
    cluster = _largest_cluster(votes, threshold)
    spread = max(v.score for v in votes) - min(v.score for v in votes)
    consensus, agreement = per_sample(votes)
    if len(cluster) >= min_agree and 2 * len(cluster) > len(votes):
        inside = {v.result_id for v in cluster}
        return Verdict(
            "DONE",
            float(median(v.score for v in cluster)),
            spread,
            tuple(sorted(inside)),
            tuple(sorted(v.result_id for v in votes if v.result_id not in inside)),
            consensus,
            agreement,
        )
    return Verdict("DISPUTED", None, spread, (), (), consensus, agreement)


def verdict_from_dict(fields: Mapping[str, Any]) -> Verdict:
    """The inverse of :meth:`Verdict.as_dict`."""
    return Verdict(
        fields["status"],
        fields["score"],
        fields["spread"],
        tuple(fields["agreeing"]),
        tuple(fields["outliers"]),
        tuple(fields["sample_consensus"]),
        tuple(fields["sample_agreement"]),
    )


def canary_passes(agreeing_scores: Sequence[float], score: float, threshold: float = 0.5) -> bool:
    """Whether a canary result agrees with the settled answer of its task.

    A canary is a task that already reached consensus; the extra result passes when
    it would have joined the agreeing cluster: the cluster's scores together with it
    still lie within ``threshold`` of each other (the rule every result of an open
    task is held to).
    """
    if not agreeing_scores:
        raise ValueError("a canary needs the agreeing scores of its settled task")
    scores = [*agreeing_scores, score]
    return max(scores) - min(scores) <= threshold + 1e-12
