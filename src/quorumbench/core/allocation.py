"""Prize-pool allocation: who gets how much of a pool's funds (pure; CONTRACT STUB).

Rules (``parse_rule`` names, parameters and defaults):

* ``ArithmeticDecrease`` (``k``, default 10): place r of the K = min(k, N) paid places
  gets ``(K + 1 − r) / (K (K + 1) / 2)``.
* ``Geometric`` (``q``, default 0.3, 0 < q < 1; ``k`` paid places, default 10): share
  ∝ ``q^(r − 1)``.
* ``Proportional`` (``floor``, default 0.0): share ∝ ``max(0, corrected − floor)``
  where ``corrected = (score − chance) / (1 − chance)`` (chance-corrected score).
* ``WinnerTakesAll``: place 1 gets everything.
* ``TopKEqual`` (``k``, default 3): the first k places share equally.

Ties (``exact`` | ``statistical``): tied entries share the sum of their places'
shares equally; never "earliest entry wins".

Rounding: exact shares (fractions) × funds, floored; the units left go one each by
largest remainder, then by place, then by a hash of the entry id (not entry order).
Amounts sum exactly to ``funds``, or are all zero when the rule pays nobody
(Proportional with nobody above the floor; no entries): the caller refunds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RULES = ("ArithmeticDecrease", "Geometric", "Proportional", "WinnerTakesAll", "TopKEqual")
TIE_POLICIES = ("exact", "statistical")


@dataclass(frozen=True)
class Rule:
    name: str
    params: tuple[tuple[str, Any], ...]
    """Sorted (name, value) pairs, defaults filled in (hashable, canonical)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Standing:
    """One entry's pool score: mean of its finalized pool samples, with its interval."""

    entry_id: int
    score: float
    ci_low: float
    ci_high: float
    n_samples: int
    chance: float = 0.0


@dataclass(frozen=True)
class Payout:
    entry_id: int
    place: int
    """1-based place in the standing (tied entries: their group's best place)."""
    group: int
    """Index of its tie group (0 = first); entries of one group share equally."""
    amount: int


def parse_rule(name: str, params: Mapping[str, Any] | None = None) -> Rule:
    """The rule with defaults filled in; ``ValueError`` naming the bad name or parameter."""
    raise NotImplementedError


def allocate(funds: int, standings: Sequence[Standing], rule: Rule, ties: str) -> list[Payout]:
    """Each entry's amount (module docstring), best first; ``ValueError`` on bad input
    (negative funds, unknown tie policy, repeated entry ids, scores outside [0, 1])."""
    raise NotImplementedError
