"""One definition of a model's rank on a board, for every surface that shows one.

A *board* is the set of ranked models of one ranking: the models with a row on one
benchmark, or the models with a complete aggregate. Each has a score and its 95%
interval [low, high] (``core/leaderboard.py``). For a model with score ``s`` and
interval [``low``, ``high``] on a board of N models:

* ``rank`` = 1 + the number of models with a higher score. Equal scores share a rank
  and the next rank is skipped (1, 2, 2, 4: standard competition ranking), so a rank
  never depends on model ids or the order rows were read in.
* ``best`` = 1 + the number of models whose whole interval lies above this one's
  (their ``low`` > this ``high``): no better rank is consistent with the intervals.
* ``worst`` = N − the number of models whose whole interval lies below this one's
  (their ``high`` < this ``low``).

Scores and interval ends are compared rounded to :data:`SCORE_DIGITS` decimals (two
sums of the same per-sample values can differ in their last bit); rounding all of them
alike keeps ``best ≤ rank ≤ worst`` whenever every interval holds its score. The rank depends on the
board alone: sorting, filtering and paging a view of it never change it. Ranks are
computed from the board's sorted columns by bisection (:class:`Standings`): O(N log N)
once per board, then O(log N) per model.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

SCORE_DIGITS = 9
"""Scores (and interval ends) equal to this many decimals are equal for ranking."""


def rank_key(score: float) -> float:
    """A score or interval end as ranks compare it."""
    return round(score, SCORE_DIGITS)


class Rank(NamedTuple):
    rank: int
    best: int
    worst: int


@dataclass(frozen=True)
class Standings:
    """A board's scores and interval ends as :func:`rank_key` gives them, each sorted
    ascending (:func:`standings` makes them)."""

    scores: tuple[float, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.scores)

    def rank(self, score: float, low: float, high: float) -> Rank:
        """The rank of a model of this board with ``score`` in [``low``, ``high``]."""
        n = len(self.scores)
        return Rank(
            1 + n - bisect_right(self.scores, rank_key(score)),
            1 + n - bisect_right(self.lows, rank_key(high)),
            n - bisect_left(self.highs, rank_key(low)),
        )


def standings(rows: Iterable[tuple[float, float, float]]) -> Standings:
    """The standings of a board from its (score, low, high) rows, in any order."""
    columns = list(zip(*rows, strict=True))
    if not columns:
        return Standings((), (), ())
    scores, lows, highs = (
        tuple(sorted([round(x, SCORE_DIGITS) for x in column])) for column in columns
    )
    return Standings(scores, lows, highs)


def ranks(rows: Sequence[tuple[float, float, float]]) -> list[Rank]:
    """The rank of each (score, low, high) row among all of them: :meth:`Standings.rank`
    of each, in one loop (the ask cache ranks ten thousand rows per request), each value
    rounded once."""
    keyed = [
        (round(score, SCORE_DIGITS), round(low, SCORE_DIGITS), round(high, SCORE_DIGITS))
        for score, low, high in rows
    ]
    n = len(keyed)
    scores = sorted([row[0] for row in keyed])
    lows = sorted([row[1] for row in keyed])
    highs = sorted([row[2] for row in keyed])
    return [
        Rank(
            1 + n - bisect_right(scores, score),
            1 + n - bisect_right(lows, high),
            n - bisect_left(highs, low),
        )
        for score, low, high in keyed
    ]
