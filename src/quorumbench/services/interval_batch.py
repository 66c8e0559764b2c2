"""Many 95% intervals at once: :func:`~quorumbench.core.intervals.score_interval`'s
limits for a whole answer's rows, remembered per process.

The ask cache ranks up to ten thousand models per request, each with the exact
(Clopper–Pearson) interval of its slice's sum and count. With 0/1 scores most
(sum, count) pairs repeat across models and requests, so a per-process memo answers
them; the rest (fractional sums, as TruthfulQA-MC2's probabilities give, are each
model's own) are computed together by scipy's ``betaincinv``, vectorised: 10,000
intervals in about 13 ms where ``core/intervals.py``'s pure-Python quantiles take
about 55 µs each (0.5 s). Both give the same limits: the Beta quantiles of
``score_interval``'s formula, within 1e-13 of each other (tested), far below the
:data:`~quorumbench.core.ranking.SCORE_DIGITS` that ranks compare.

``core/`` stays pure (no scipy there): the public board and the log's verifier use
``score_interval`` itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from scipy.special import betaincinv

from quorumbench.core.intervals import CONFIDENCE

KEPT = 1 << 18
"""Intervals remembered per process, by (sum, count); the memo starts afresh when full."""

_TAIL = (1 - CONFIDENCE) / 2
_memo: dict[tuple[float, int], tuple[float, float]] = {}
_lock = threading.Lock()


def forget() -> None:
    """Empty the memo (benchmarks time the first answers with it)."""
    with _lock:
        _memo.clear()


def _computed(totals: Sequence[float], ns: Sequence[int]) -> list[tuple[float, float]]:
    """``score_interval(total, n)`` for each pair, vectorised (every n > 0)."""
    n = np.asarray(ns, dtype=np.float64)
    if not (n > 0).all():
        raise ValueError("an interval needs at least one sample")
    x = np.clip(np.asarray(totals, dtype=np.float64), 0.0, n)
    above, below = x > 0, x < n
    # where a limit is fixed (0 at x = 0, 1 at x = n) the quantile is not asked for:
    # its parameters are replaced by harmless ones and the result by the fixed limit
    with np.errstate(all="ignore"):
        low = np.where(above, betaincinv(np.where(above, x, 1.0), n - x + 1, _TAIL), 0.0)
        high = np.where(below, betaincinv(x + 1, np.where(below, n - x, 1.0), 1 - _TAIL), 1.0)
    mean = x / n
    low, high = np.minimum(low, mean), np.maximum(high, mean)
    return list(zip(low.tolist(), high.tolist(), strict=True))


def score_intervals(totals: Sequence[float], ns: Sequence[int]) -> list[tuple[float, float]]:
    """The 95% interval of each (sum, count), in order (see the module docstring)."""
    keys = list(zip(totals, ns, strict=True))
    get = _memo.get
    known: dict[tuple[float, int], tuple[float, float]] = {}
    missing: list[tuple[float, int]] = []
    for key in dict.fromkeys(keys):  # each distinct pair once
        bounds = get(key)
        if bounds is None:
            missing.append(key)
        else:
            known[key] = bounds
    if missing:
        fresh = dict(zip(missing, _computed(*zip(*missing, strict=True)), strict=True))
        known.update(fresh)
        with _lock:
            if len(_memo) + len(fresh) > KEPT:
                _memo.clear()
            _memo.update(fresh)
    return [known[key] for key in keys]
