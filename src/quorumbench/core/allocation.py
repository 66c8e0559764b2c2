"""Prize-pool allocation: who gets how much of a pool's funds (pure).

Rules (``parse_rule`` names, parameters and defaults); N entries, places 1..N:

* ``ArithmeticDecrease`` (``k``, default 10): place r of the K = min(k, N) paid places
  gets ``(K + 1 − r) / (K (K + 1) / 2)``.
* ``Geometric`` (``q``, default 0.3, 0 < q < 1; ``k`` paid places, default 10): place r
  of the K = min(k, N) paid places gets ``q^(r − 1) / Σ_{j=1..K} q^(j − 1)``.
* ``Proportional`` (``floor``, default 0.0, 0 ≤ floor < 1): an entry gets
  ``w / Σ w`` with ``w = max(0, corrected − floor)`` and
  ``corrected = (score − chance) / (1 − chance)`` (chance-corrected score).
* ``WinnerTakesAll``: place 1 gets everything.
* ``TopKEqual`` (``k``, default 3): the first K = min(k, N) places get ``1 / K`` each.

Numbers: every share is an exact :class:`fractions.Fraction`. A float (a score, an
interval end, a chance, ``q``, ``floor``) enters as the decimal it prints as,
``Fraction(repr(x))`` (0.3 is exactly 3/10), so results are the same on every machine.

Order: score descending; equal scores are ordered by ``sha256(str(entry_id))`` in hex
order (never by entry id or join order). Place r is the r-th position in this order.

Ties (``exact`` | ``statistical``) form groups of adjacent entries:

* ``exact``: entries with equal scores form one group.
* ``statistical``: as ``exact``, and two neighbours are also merged when their 95%
  intervals ``[ci_low, ci_high]`` overlap and the boundary between their places is a
  paid one (their ungrouped shares differ: any boundary inside ArithmeticDecrease or
  Geometric's paid places, the last paid / first unpaid one, TopKEqual's k / k+1, ...).
  Merging is transitive along the order (A~B and B~C give one group A, B, C); a run
  of equal scores is compared as one interval, the union of its members' intervals.

Every member of a group gets the mean of the group's ungrouped shares (the sum of its
places' shares, split equally), and its ``place`` is the group's best place.

Rounding: ``amount = floor(funds × share)``; the units left over (fewer than the number
of entries) go one each, in order of the largest fractional remainder, then the better
place, then ``sha256(str(entry_id))`` in hex order. Amounts sum exactly to ``funds``,
or are all zero when the rule pays nobody (no entries, or Proportional with nobody
above the floor): the caller refunds.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

RULES = ("ArithmeticDecrease", "Geometric", "Proportional", "WinnerTakesAll", "TopKEqual")
TIE_POLICIES = ("exact", "statistical")

_PARAMS: dict[str, dict[str, Any]] = {
    "ArithmeticDecrease": {"k": 10},
    "Geometric": {"k": 10, "q": 0.3},
    "Proportional": {"floor": 0.0},
    "WinnerTakesAll": {},
    "TopKEqual": {"k": 3},
}
"""Each rule's parameters with their defaults (an int default: an int parameter)."""


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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_param(rule: str, key: str, value: Any) -> Any:
    if key == "k":
        if not _is_int(value):
            raise ValueError(f"{rule}: parameter k must be an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"{rule}: parameter k must be at least 1, got {value}")
        return value
    if not _is_real(value):
        raise ValueError(f"{rule}: parameter {key} must be a number, got {value!r}")
    if key == "q" and not 0 < value < 1:
        raise ValueError(f"{rule}: parameter q must be between 0 and 1 (exclusive), got {value}")
    if key == "floor" and not 0 <= value < 1:
        raise ValueError(f"{rule}: parameter floor must be in [0, 1), got {value}")
    return float(value)


def parse_rule(name: str, params: Mapping[str, Any] | None = None) -> Rule:
    """The rule with defaults filled in; ``ValueError`` naming the bad name or parameter."""
    if name not in _PARAMS:
        raise ValueError(f"unknown allocation rule {name!r} (one of {', '.join(RULES)})")
    defaults = _PARAMS[name]
    given = dict(params or {})
    for key in given:
        if key not in defaults:
            known = ", ".join(sorted(defaults)) or "none"
            raise ValueError(f"{name}: unknown parameter {key!r} (parameters: {known})")
    values = {
        key: _check_param(name, key, given.get(key, default)) for key, default in defaults.items()
    }
    return Rule(name, tuple(sorted(values.items())))


def _exact(value: float) -> Fraction:
    return Fraction(repr(value))


def _hash(entry_id: int) -> str:
    return hashlib.sha256(str(entry_id).encode("utf-8")).hexdigest()


def _check_standing(s: Standing) -> None:
    where = f"entry {s.entry_id}"
    for field in ("score", "ci_low", "ci_high", "chance"):
        value = getattr(s, field)
        if not _is_real(value) or not 0 <= value <= 1:
            raise ValueError(f"{where}: {field} must be a number in [0, 1], got {value!r}")
    if s.chance == 1:
        raise ValueError(f"{where}: chance must be below 1")
    if not s.ci_low <= s.score <= s.ci_high:
        raise ValueError(f"{where}: needs ci_low <= score <= ci_high")
    if not _is_int(s.n_samples) or s.n_samples < 0:
        raise ValueError(f"{where}: n_samples must be a non-negative integer")


def _place_shares(rule: Rule, ordered: Sequence[Standing]) -> list[Fraction]:
    """Each position's share before grouping (sums to 1, or to 0 when nobody is paid)."""
    n = len(ordered)
    p = rule.as_dict()
    if rule.name == "Proportional":
        floor = _exact(p["floor"])
        weights = []
        for s in ordered:
            chance = _exact(s.chance)
            corrected = (_exact(s.score) - chance) / (1 - chance)
            weights.append(max(Fraction(0), corrected - floor))
        total = sum(weights, Fraction(0))
        return [w / total if total else Fraction(0) for w in weights]
    paid = 1 if rule.name == "WinnerTakesAll" else min(p["k"], n)
    if rule.name == "ArithmeticDecrease":
        raw = [Fraction(paid + 1 - r) for r in range(1, paid + 1)]
    elif rule.name == "Geometric":
        q = _exact(p["q"])
        raw = [q ** (r - 1) for r in range(1, paid + 1)]
    else:  # WinnerTakesAll, TopKEqual
        raw = [Fraction(1)] * paid
    total = sum(raw, Fraction(0))
    shares = [x / total for x in raw]
    return (shares + [Fraction(0)] * n)[:n]


def _groups(ordered: Sequence[Standing], shares: Sequence[Fraction], ties: str) -> list[int]:
    """The group index of each position.

    Under ``statistical``, a run of equal scores counts as one interval, the union of its
    members' (they all contain the score), so the hash order inside a tie cannot decide
    whether a neighbour is merged.
    """
    envelope: dict[float, tuple[float, float]] = {}
    for s in ordered:
        low, high = envelope.get(s.score, (s.ci_low, s.ci_high))
        envelope[s.score] = (min(low, s.ci_low), max(high, s.ci_high))
    group = [0] * len(ordered)
    for i in range(1, len(ordered)):
        a, b = envelope[ordered[i - 1].score], envelope[ordered[i].score]
        same = ordered[i - 1].score == ordered[i].score
        if ties == "statistical" and not same:
            overlap = max(a[0], b[0]) <= min(a[1], b[1])
            same = overlap and shares[i - 1] != shares[i]
        group[i] = group[i - 1] + (0 if same else 1)
    return group


def allocate(funds: int, standings: Sequence[Standing], rule: Rule, ties: str) -> list[Payout]:
    """Each entry's amount (module docstring), best first.

    ``ValueError`` on bad input: funds not a non-negative int, an unknown rule, bad rule
    parameters, an unknown tie policy, repeated entry ids, a score, interval end or
    chance outside [0, 1] (chance below 1), ``ci_low <= score <= ci_high`` not holding,
    or a negative ``n_samples``.
    """
    if not _is_int(funds) or funds < 0:
        raise ValueError(f"funds must be a non-negative integer, got {funds!r}")
    rule = parse_rule(rule.name, rule.as_dict())
    if ties not in TIE_POLICIES:
        raise ValueError(f"unknown tie policy {ties!r} (one of {', '.join(TIE_POLICIES)})")
    seen: set[int] = set()
    for s in standings:
        if s.entry_id in seen:
            raise ValueError(f"entry {s.entry_id} appears twice")
        seen.add(s.entry_id)
        _check_standing(s)
    ordered = sorted(standings, key=lambda s: (-s.score, _hash(s.entry_id)))
    shares = _place_shares(rule, ordered)
    group = _groups(ordered, shares, ties)
    n = len(ordered)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        members.setdefault(g, []).append(i)
    place = [members[group[i]][0] + 1 for i in range(n)]
    share = [
        sum((shares[j] for j in members[group[i]]), Fraction(0)) / len(members[group[i]])
        for i in range(n)
    ]
    raw = [funds * x for x in share]
    amounts = [math.floor(x) for x in raw]
    if any(share):
        left = funds - sum(amounts)
        by_remainder = sorted(
            range(n), key=lambda i: (-(raw[i] - amounts[i]), place[i], _hash(ordered[i].entry_id))
        )
        for i in by_remainder[:left]:
            amounts[i] += 1
    return [
        Payout(entry_id=s.entry_id, place=place[i], group=group[i], amount=amounts[i])
        for i, s in enumerate(ordered)
    ]
