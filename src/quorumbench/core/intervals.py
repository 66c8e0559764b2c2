"""The one 95% interval every score on the site carries: exact (Clopper–Pearson) limits.

:func:`score_interval` takes ``n`` scores in [0, 1] by their sum ``total`` and gives

* ``low``  = the 2.5% quantile of Beta(total, n − total + 1) (0 when total = 0),
* ``high`` = the 97.5% quantile of Beta(total + 1, n − total) (1 when total = n).

For 0/1 scores this is the Clopper–Pearson interval of a proportion: its coverage is at
least 95% for every true rate and every n, including the ends, where ``mean ± 1.96·se``
shrinks to a point and the Wilson interval dips below 95% (all 8 samples wrong gives
[0, 0.369], not [0, 0]). For scores in between (TruthfulQA-MC2's per-sample
probabilities, partial credit) the same formula takes the fractional sum: a [0, 1]
score with mean μ has variance at most μ(1 − μ), the variance of a 0/1 score, so the
binomial is the worst case and the interval is conservative (the coverage simulation
in ``tests/unit/core/test_intervals.py`` measures it; the methodology page shows the
table).

A weighted mean of several such scores (the aggregate over benchmarks) gets
:func:`combined_interval` of their intervals: the MOVER limits (Zou & Donner 2008),
which need the parts to be independent and each part's interval to be valid.

The Beta quantiles are computed here without scipy: the regularized incomplete beta
function by its continued fraction (modified Lentz), inverted by Newton's method kept
inside a bisection bracket.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CONFIDENCE = 0.95
"""The two-sided level of every interval: 2.5% in each tail."""
_TAIL = (1 - CONFIDENCE) / 2
_TINY = 1e-300
_EPS = 1e-15
_STEP_TOLERANCE = 1e-9
"""Halley's method converges cubically: after a step this small, the next is below 1e-20."""
MAX_TERMS = 20_000
"""Continued-fraction terms before giving up; it needs about √max(a, b) of them."""


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _stirling_rest(z: float) -> float:
    """ln Γ(z) − ((z − ½) ln z − z + ½ ln 2π) for z ≥ 10, by its asymptotic series (the
    first term left out is below 3e-17 there)."""
    w = 1.0 / (z * z)
    series = 1.0 / 156.0 * w - 691.0 / 360360.0
    series = series * w + 1.0 / 1188.0
    series = series * w - 1.0 / 1680.0
    series = series * w + 1.0 / 1260.0
    series = series * w - 1.0 / 360.0
    return (series * w + 1.0 / 12.0) / z


_LARGE = 10.0
"""A shape from here on takes Stirling's form in :func:`_front`."""


def _log_front_large_b(log_x: float, log_1mx: float, a: float, b: float) -> float:
    """ln(x^a (1 − x)^b / B(a, b)) for b ≥ 10 (any a > 0): ln Γ(a + b) − ln Γ(b) by
    Stirling, so nothing of the size of ln Γ(b) is subtracted."""
    total = a + b
    return (
        a * (log_x + math.log(total))
        + b * log_1mx
        + (b - 0.5) * math.log1p(a / b)
        - a
        - math.lgamma(a)
        + _stirling_rest(total)
        - _stirling_rest(b)
    )


def _front(x: float, a: float, b: float) -> float:
    """x^a (1 − x)^b / B(a, b), the factor before I_x's continued fraction.

    Straight from ``lgamma`` it is the exponential of a small difference of large
    terms (about 870 − 866 for a = b = 600), whose rounding costs some 1e-12. With a
    large shape, Stirling's formula for its Gamma functions avoids that (as DiDonato
    and Morris do); with both large, the exponent is taken relative to the mean
    x₀ = a / (a + b), from the small x − x₀ itself."""
    if a < _LARGE and b < _LARGE:
        return math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if a < _LARGE:
        return math.exp(_log_front_large_b(math.log(x), math.log1p(-x), a, b))
    if b < _LARGE:  # the same with the roles of x and 1 − x swapped
        return math.exp(_log_front_large_b(math.log1p(-x), math.log(x), b, a))
    total = a + b
    mean = a / total
    d = x - mean
    exponent = a * math.log1p(d / mean) + b * math.log1p(-d / (1.0 - mean))
    rest = _stirling_rest(total) - _stirling_rest(a) - _stirling_rest(b)
    return math.sqrt(a * b / (2.0 * math.pi * total)) * math.exp(exponent + rest)


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, MAX_TERMS):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + even * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + even / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + odd * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + odd / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ValueError(f"the incomplete beta function did not converge for a={a}, b={b}")


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the distribution function of Beta(a, b) at ``x`` (a, b > 0)."""
    if a <= 0 or b <= 0:
        raise ValueError("the Beta distribution needs a > 0 and b > 0")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = _front(x, a, b)
    if x < (a + 1) / (a + b + 2):  # where the fraction converges quickly
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def _normal_upper(q: float) -> float:
    """The y with P(Z > y) = q for 0 < q ≤ 1/2, to 4.5e-4 (Abramowitz & Stegun 26.2.23)."""
    t = math.sqrt(-2.0 * math.log(q))
    return t - (2.515517 + t * (0.802853 + t * 0.010328)) / (
        1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    )


def _first_guess(p: float, a: float, b: float, log_beta: float) -> float:
    """A starting point for :func:`beta_quantile` (within about 1e-3 when a, b ≥ 1)."""
    if a >= 1 and b >= 1:  # Abramowitz & Stegun 26.5.22
        y = _normal_upper(p) if p <= 0.5 else -_normal_upper(1.0 - p)
        lam = (y * y - 3.0) / 6.0
        h = 2.0 / (1.0 / (2 * a - 1) + 1.0 / (2 * b - 1))
        w = y * math.sqrt(h + lam) / h - (1.0 / (2 * b - 1) - 1.0 / (2 * a - 1)) * (
            lam + 5.0 / 6.0 - 2.0 / (3.0 * h)
        )
        return a / (a + b * math.exp(min(2.0 * w, 700.0)))
    # Near 0, I_x(a, b) ≈ x^a / (a·B(a, b)); near 1, 1 − I_x ≈ (1 − x)^b / (b·B(a, b)).
    if p < regularized_beta(0.5, a, b):
        return math.exp(min(math.log(0.5), (math.log(p) + math.log(a) + log_beta) / a))
    return -math.expm1(min(math.log(0.5), (math.log1p(-p) + math.log(b) + log_beta) / b))


def beta_quantile(p: float, a: float, b: float) -> float:
    """The ``p`` quantile of Beta(a, b): the x in [0, 1] with I_x(a, b) = p.

    Halley's method (Newton's with the density's own curvature) from a first guess,
    each step kept inside a bracket that shrinks around the root: a step that would
    leave it bisects instead.
    """
    if not 0.0 < p < 1.0:
        raise ValueError("a quantile needs 0 < p < 1")
    if a <= 0 or b <= 0:
        raise ValueError("the Beta distribution needs a > 0 and b > 0")
    log_beta = _log_beta(a, b)
    x = _first_guess(p, a, b, log_beta)
    low, high = 0.0, 1.0
    while 0.0 < x < 1.0:
        error = regularized_beta(x, a, b) - p
        if error == 0.0:
            return x
        if error < 0.0:
            low = x
        else:
            high = x
        log_density = (a - 1) * math.log(x) + (b - 1) * math.log1p(-x) - log_beta
        if abs(log_density) < 700:
            newton = error * math.exp(-log_density)
            bend = newton * ((a - 1) / x - (b - 1) / (1.0 - x))
            step = newton / (1.0 - 0.5 * bend) if abs(bend) < 1.0 else newton
            following = x - step
        else:
            following = -1.0  # the density over- or underflows: bisect
        if low < following < high:
            if abs(following - x) <= _STEP_TOLERANCE * x:
                return following
            x = following
        else:  # the step would leave the bracket: bisect
            x = (low + high) / 2
            if not low < x < high or high - low <= 4 * _EPS * x:
                return x  # (adjacent floats: the bracket cannot shrink further)
    return x  # the quantile is 0 or 1 to double precision


def score_interval(total: float, n: float) -> tuple[float, float]:
    """The 95% interval of the mean of ``n`` scores in [0, 1] that sum to ``total``.

    See the module docstring. ``total`` is clamped to [0, n]; the interval always
    holds the mean ``total / n`` and is never a point.
    """
    if not n > 0:
        raise ValueError("an interval needs at least one sample")
    x = min(max(total, 0.0), n)
    low = beta_quantile(_TAIL, x, n - x + 1) if x > 0 else 0.0
    high = beta_quantile(1 - _TAIL, x + 1, n - x) if x < n else 1.0
    mean = x / n
    return min(low, mean), max(high, mean)


def combined_interval(parts: Sequence[tuple[float, float, float, float]]) -> tuple[float, float]:
    """The 95% interval of a weighted mean of independent scores, from each one's own.

    ``parts`` are (weight, score, low, high). With shares ``a = w / Σw`` and mean
    ``m = Σ a·score``, the limits are

    * ``low  = m − sqrt(Σ (a·(score − low))²)``,
    * ``high = m + sqrt(Σ (a·(high − score))²)``

    (for a negative share the two distances swap): the method of variance estimates
    recovery, MOVER (Zou & Donner 2008; Newcombe's interval for a difference of
    proportions is the two-part case). Each part's distance to its limit stands for
    its own 1.96 standard errors on that side, so the limits follow skewed parts (a
    score of 0 on few samples) where a symmetric normal sum would cut them off. One
    part gives back its own interval; the limits stay within the weighted means of
    the parts' limits, so within [0, 1], and hold ``m``.
    """
    total = math.fsum(w for w, _, _, _ in parts)
    if not parts or total <= 0:
        raise ValueError("an aggregate needs positive weights")
    shares = [(w / total, score, low, high) for w, score, low, high in parts]
    mean = math.fsum(a * score for a, score, _, _ in shares)
    below = math.fsum(
        (a * (score - low if a >= 0 else high - score)) ** 2 for a, score, low, high in shares
    )
    above = math.fsum(
        (a * (high - score if a >= 0 else score - low)) ** 2 for a, score, low, high in shares
    )
    return max(0.0, mean - math.sqrt(below)), min(1.0, mean + math.sqrt(above))
