"""How often the 95% intervals hold the true score: a simulation with a fixed seed.

Each cell draws ``TRIALS`` boards of n samples with a known true mean, builds the
leaderboard's interval from them exactly as the server does (``Accumulator`` →
``interval``; the aggregate through ``weighted_aggregate``) and counts how often it
holds the truth. Every cell must reach :data:`FLOOR`. ``pytest -s`` prints the tables;
docs/server.md ("Leaderboard") and the methodology page quote them.

For contrast the 0/1 table also measures the intervals we no longer use, Wilson's and
``mean ± 1.96·se``, on the same draws, and checks that they do fall short somewhere:
the simulation can tell a bad interval from a good one.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Sequence
from functools import cache

import pytest

from quorumbench.core.leaderboard import Accumulator, Interval, interval, weighted_aggregate

# Monte Carlo: thousands of simulated boards (about 30 s on one core); `make test` runs
# it, `make test-fast` does not.
pytestmark = pytest.mark.slow

SEED = 20261208
TRIALS = 2000
FLOOR = 0.93
Z = 1.959963984540054
RATES = (0.0, 0.02, 0.1, 0.5, 0.9, 1.0)
SIZES = (5, 8, 25, 100)


@cache
def binary_interval(correct: int, n: int) -> Interval:
    """The server's interval for ``correct`` right answers out of ``n`` (cached: only
    n + 1 of them exist)."""
    return interval(Accumulator(1, n, float(correct), float(correct), float(correct)))


def wilson(correct: int, n: int) -> tuple[float, float]:
    p, z2 = correct / n, Z * Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def normal(correct: int, n: int) -> tuple[float, float]:
    """The interval before: mean ± 1.96 × (the samples' standard deviation / √n)."""
    p = correct / n
    se = math.sqrt(p * (1 - p) / (n - 1))
    return p - Z * se, p + Z * se


def show(text: str) -> None:
    """Onto the terminal with ``pytest -s`` (captured otherwise)."""
    sys.stdout.write(f"\n{text}\n")


def holds(low: float, high: float, truth: float) -> bool:
    return low - 1e-12 <= truth <= high + 1e-12


def table(title: str, columns: Sequence[str], rows: dict[str, list[float]]) -> str:
    width = max(len(k) for k in rows)
    lines = [title, " | ".join([" " * width, *(f"{c:>6}" for c in columns)])]
    lines += [" | ".join([k.ljust(width), *(f"{v:6.1%}" for v in vs)]) for k, vs in rows.items()]
    return "\n".join(lines)


def test_coverage_for_right_or_wrong_samples():
    rng = random.Random(SEED)
    ours: dict[str, list[float]] = {}
    others: dict[str, list[float]] = {"Wilson": [], "mean ± 1.96·se": []}
    for p in RATES:
        ours[f"p = {p:g}"] = []
        for n in SIZES:
            hits = [0, 0, 0]
            for _ in range(TRIALS):
                correct = sum(rng.random() < p for _ in range(n))
                mine = binary_interval(correct, n)
                hits[0] += holds(mine.ci_low, mine.ci_high, p)
                hits[1] += holds(*wilson(correct, n), p)
                hits[2] += holds(*normal(correct, n), p)
            ours[f"p = {p:g}"].append(hits[0] / TRIALS)
            if p in (0.02, 0.9):
                others["Wilson"].append(hits[1] / TRIALS)
                others["mean ± 1.96·se"].append(hits[2] / TRIALS)
    columns = [f"n={n}" for n in SIZES]
    show(table(f"0/1 samples, {TRIALS} trials per cell: exact interval", columns, ours))
    show(table("the same draws, p = 0.02 then 0.9: others", columns * 2, others))
    assert min(min(v) for v in ours.values()) >= FLOOR
    assert ours["p = 0"] == ours["p = 1"] == [1.0] * len(SIZES)  # an end is never excluded
    # the simulation can fail an interval: Wilson's dips at p = 0.02, n = 8
    assert others["Wilson"][SIZES.index(8)] < FLOOR
    assert min(others["mean ± 1.96·se"]) < 0.5


def beta_scores(mean: float, concentration: float) -> Callable[[random.Random], float]:
    """Per-sample scores drawn from Beta(mean·k, (1 − mean)·k): MC2-like probabilities,
    near 0 and 1 for a small k."""
    a, b = mean * concentration, (1 - mean) * concentration
    return lambda rng: rng.betavariate(a, b)


def credit(shares: tuple[float, float, float]) -> Callable[[random.Random], float]:
    """Partial credit: 0, 0.5 or 1 with these probabilities."""
    return lambda rng: rng.choices((0.0, 0.5, 1.0), shares)[0]


SCORE_TRIALS = 1000
SCORE_CASES: list[tuple[str, float, Callable[[random.Random], float]]] = [
    *(
        (f"Beta, mean {m:g}, k = {k:g}", m, beta_scores(m, k))
        for k in (0.5, 2.0)
        for m in (0.02, 0.1, 0.5, 0.9)
    ),
    ("0/½/1 at 90/8/2%", 0.06, credit((0.9, 0.08, 0.02))),
    ("0/½/1 at 50/30/20%", 0.35, credit((0.5, 0.3, 0.2))),
]


def test_coverage_for_scores_between_0_and_1():
    rng = random.Random(SEED + 1)
    rows: dict[str, list[float]] = {}
    for name, truth, draw in SCORE_CASES:
        rows[name] = []
        for n in SIZES:
            hits = 0
            for _ in range(SCORE_TRIALS):
                row = sampled(n, draw, rng)
                hits += holds(row.ci_low, row.ci_high, truth)
            rows[name].append(hits / SCORE_TRIALS)
    show(
        table(
            f"scores in [0, 1], {SCORE_TRIALS} trials per cell",
            [f"n={n}" for n in SIZES],
            rows,
        )
    )
    assert min(min(v) for v in rows.values()) >= FLOOR


AGGREGATE_TRIALS = 2000
AGGREGATES: list[tuple[str, list[tuple[float, float, int]]]] = [
    # (weight, true rate, samples) per benchmark
    ("equal: 0.02 on 8 and 8", [(1, 0.02, 8), (1, 0.02, 8)]),
    ("equal: 0.5 on 5 and 5", [(1, 0.5, 5), (1, 0.5, 5)]),
    ("equal: 0.5 on 8, 25", [(1, 0.5, 8), (1, 0.5, 25)]),
    ("equal: 0.9 on 25, 100", [(1, 0.9, 25), (1, 0.9, 100)]),
    ("0 on 5, 0.02 on 100", [(1, 0.0, 5), (1, 0.02, 100)]),
    ("0.9 on 5, 0.1 on 100", [(1, 0.9, 5), (1, 0.1, 100)]),
    ("0.5 on 5, 0.02 on 200", [(1, 0.5, 5), (1, 0.02, 200)]),
    ("weights 1:3, 0.02 on 8, 0.5 on 25", [(1, 0.02, 8), (3, 0.5, 25)]),
    ("weights 3:1, 0.02 on 8, 0.5 on 25", [(3, 0.02, 8), (1, 0.5, 25)]),
    ("three: 0.1/25, 0.6/8, 0.95/100 at 1:2:0.5", [(1, 0.1, 25), (2, 0.6, 8), (0.5, 0.95, 100)]),
    ("three: 1/8, 0.98/25, 0.9/5", [(1, 1.0, 8), (1, 0.98, 25), (1, 0.9, 5)]),
    ("three: 0.1, 0.3, 0.2 on 100 each", [(1, 0.1, 100), (1, 0.3, 100), (1, 0.2, 100)]),
]
MIXED = "0/1 at 0.5 on 25, Beta(0.1, k = 0.5) on 8"
"""An aggregate whose second benchmark scores per-sample probabilities (like MC2)."""


def sampled(n: int, draw: Callable[[random.Random], float], rng: random.Random) -> Interval:
    samples = [draw(rng) for _ in range(n)]
    total = math.fsum(samples)
    return interval(Accumulator(1, n, total, total, math.fsum(s * s for s in samples)))


def test_coverage_of_the_weighted_aggregate():
    rng = random.Random(SEED + 2)
    rows: dict[str, list[float]] = {}
    for name, parts in AGGREGATES:
        total = sum(w for w, _, _ in parts)
        truth = sum(w * p for w, p, _ in parts) / total
        hits = 0
        for _ in range(AGGREGATE_TRIALS):
            board = [
                (w, binary_interval(sum(rng.random() < p for _ in range(n)), n))
                for w, p, n in parts
            ]
            aggregate = weighted_aggregate(board)
            hits += holds(aggregate.ci_low, aggregate.ci_high, truth)
        rows[name] = [hits / AGGREGATE_TRIALS]
    hits = 0
    for _ in range(AGGREGATE_TRIALS):
        board = [
            (1.0, binary_interval(sum(rng.random() < 0.5 for _ in range(25)), 25)),
            (1.0, sampled(8, beta_scores(0.1, 0.5), rng)),
        ]
        aggregate = weighted_aggregate(board)
        hits += holds(aggregate.ci_low, aggregate.ci_high, 0.3)
    rows[MIXED] = [hits / AGGREGATE_TRIALS]
    show(table(f"weighted aggregate, {AGGREGATE_TRIALS} trials", ["cover"], rows))
    assert min(v[0] for v in rows.values()) >= FLOOR
