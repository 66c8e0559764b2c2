"""Model sizes written as numbers: ``under 1B``, ``7B``, ``at least 13B``, ``1B 이하``,
``70억 파라미터 이상``.

A number with a unit (``B``/``billion``, ``M``/``million``, ``T``; Korean ``억`` = 10^8,
``천만`` = 10^7, ``조`` = 10^12) is a parameter count. A word before it (``under``,
``below``, ``at most``, ``up to``, ``<``; ``over``, ``above``, ``at least``, ``>``) or
after it (``or less``, ``or more``, ``+``; Korean ``이하``, ``미만``, ``이상``, ``초과``)
makes it an upper or a lower bound (inclusive). A bare size (``7B``) means that size
class: from 80% to 120% of it (``7B``: 5.6B to 8.4B).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

_UNITS = {
    "b": 10**9, "bn": 10**9, "billion": 10**9, "m": 10**6, "mn": 10**6, "million": 10**6,
    "t": 10**12, "trillion": 10**12, "억": 10**8, "천만": 10**7, "조": 10**12,
}  # fmt: skip
_BELOW = (
    r"under|below|less than|smaller than|fewer than|at most|up to|no more than|max|maximum|<=|<|≤"
)
_ABOVE = r"over|above|more than|larger than|bigger than|greater than|at least|min|minimum|>=|>|≥"
_AFTER_BELOW = r"or less|or smaller|or fewer|or below|and under|and below|이하|미만|까지|보다 작은"
_AFTER_ABOVE = r"or more|or larger|or bigger|or above|and up|and above|\+|이상|초과|보다 큰"
_SIZE = re.compile(
    rf"(?:(?<!\w)(?:(?P<below>{_BELOW})|(?P<above>{_ABOVE})))?\s*"
    r"(?<![\w.])(?P<num>\d+(?:\.\d+)?)\s*-?\s*"
    r"(?P<unit>billion|million|trillion|bn|mn|천만|억|조|[bmt](?![a-z]))"
    r"(?:\s*-?\s*(?:parameters?|params?|파라미터|매개변수|개))?"
    rf"(?:\s*(?:(?P<after_below>{_AFTER_BELOW})|(?P<after_above>{_AFTER_ABOVE})))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SizeHit:
    text: str
    start: int
    end: int
    min_params: int | None
    max_params: int | None


def find_sizes(query: str) -> list[SizeHit]:
    """Every size written in ``query``, in order."""
    hits = []
    for m in _SIZE.finditer(query):
        count = int(Decimal(m["num"]) * _UNITS[m["unit"].lower()])
        low: int | None
        high: int | None
        if m["below"] or m["after_below"]:
            low, high = None, count
        elif m["above"] or m["after_above"]:
            low, high = count, None
        else:
            low, high = count * 8 // 10, count * 12 // 10
        start = (
            m.start("below") if m["below"] else m.start("above") if m["above"] else m.start("num")
        )
        text = query[start : m.end()].rstrip()
        hits.append(SizeHit(text, start, start + len(text), low, high))
    return hits
