import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core import intervals
from quorumbench.core.intervals import (
    beta_quantile,
    combined_interval,
    regularized_beta,
    score_interval,
)

# --- the regularized incomplete beta function ----------------------------------------


@pytest.mark.parametrize("x", [0.001, 0.1, 0.37, 0.5, 0.9, 0.999])
def test_regularized_beta_closed_forms(x):
    assert regularized_beta(x, 1.0, 1.0) == pytest.approx(x, abs=1e-14)  # uniform
    assert regularized_beta(x, 3.5, 1.0) == pytest.approx(x**3.5, abs=1e-14)
    assert regularized_beta(x, 1.0, 7.0) == pytest.approx(1 - (1 - x) ** 7, abs=1e-14)
    arcsine = 2 / math.pi * math.asin(math.sqrt(x))
    assert regularized_beta(x, 0.5, 0.5) == pytest.approx(arcsine, abs=1e-13)


@pytest.mark.parametrize(("n", "p"), [(8, 0.3), (25, 0.02), (100, 0.5), (100, 0.93), (400, 0.1)])
def test_regularized_beta_is_the_binomial_tail(n, p):
    """I_p(k, n − k + 1) = P(Binomial(n, p) ≥ k), summed exactly here."""
    for k in range(1, n + 1, max(1, n // 13)):
        tail = math.fsum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        assert regularized_beta(p, k, n - k + 1) == pytest.approx(tail, abs=1e-13)


@pytest.mark.parametrize(
    ("x", "a", "b", "expected"),  # (mpmath at 50 digits)
    [
        (0.3, 2.5, 3.5, 0.296752989295666),
        (0.25, 30.0, 70.0, 0.135814904283427),
        (0.001, 0.2, 40.0, 0.567303964067721),
    ],
)
def test_regularized_beta_known_values(x, a, b, expected):
    assert regularized_beta(x, a, b) == pytest.approx(expected, abs=1e-13)
    assert 1 - regularized_beta(1 - x, b, a) == pytest.approx(expected, abs=1e-13)


def test_regularized_beta_ends_and_errors():
    assert regularized_beta(0.0, 2.0, 3.0) == 0.0
    assert regularized_beta(-1.0, 2.0, 3.0) == 0.0
    assert regularized_beta(1.0, 2.0, 3.0) == 1.0
    with pytest.raises(ValueError, match="a > 0 and b > 0"):
        regularized_beta(0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="did not converge"):  # √1e12 terms would be needed
        regularized_beta(0.5, 1e12, 1e12)


# --- its inverse -----------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.025, 0.3, 0.975])
@pytest.mark.parametrize("shape", [0.7, 1.0, 4.0, 250.0])
def test_beta_quantile_closed_forms(p, shape):
    assert beta_quantile(p, shape, 1.0) == pytest.approx(p ** (1 / shape), rel=1e-12)
    assert beta_quantile(p, 1.0, shape) == pytest.approx(1 - (1 - p) ** (1 / shape), rel=1e-12)


@given(
    st.floats(min_value=0.001, max_value=0.999),
    st.floats(min_value=0.05, max_value=2000.0),
    st.floats(min_value=0.05, max_value=2000.0),
)
def test_beta_quantile_inverts_the_distribution(p, a, b):
    q = beta_quantile(p, a, b)
    assert 0.0 <= q <= 1.0
    if 1e-300 < q < 1 - 1e-12:  # (the distribution at q, not q, is what can be off there)
        density = math.exp(
            (a - 1) * math.log(q) + (b - 1) * math.log1p(-q) - intervals._log_beta(a, b)
        )
        # within a few ulps of q, or of p where the density is tiny
        assert abs(regularized_beta(q, a, b) - p) <= max(1e-12, 1e-13 * q * density)


def test_beta_quantile_edge_paths():
    assert beta_quantile(0.5, 1.0, 1.0) == 0.5  # the first guess is the root
    assert beta_quantile(0.025, 1e-3, 10.0) == 0.0  # below the smallest double
    assert 0.0 < beta_quantile(0.025, 0.005, 26.0) < 1e-300  # subnormal: bisects to the end
    assert beta_quantile(0.975, 10.0, 1e-3) == 1.0
    for p, a, b in [(0.1, 0.3, 0.2), (0.9, 0.3, 0.2), (0.5, 0.05, 0.05)]:  # U-shaped
        assert regularized_beta(beta_quantile(p, a, b), a, b) == pytest.approx(p, abs=1e-12)
    for p in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="0 < p < 1"):
            beta_quantile(p, 1.0, 1.0)
    with pytest.raises(ValueError, match="a > 0 and b > 0"):
        beta_quantile(0.5, 1.0, -1.0)


# --- the interval -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "n", "low", "high"),  # Clopper–Pearson (mpmath at 50 digits)
    [
        (0, 8, 0.0, 0.369416647553),  # all 8 wrong: not the point 0.000
        (1, 8, 0.00315972353125, 0.526509670875),
        (4, 8, 0.157012770487, 0.842987229513),
        (8, 8, 0.630583352447, 1.0),
        (1, 10, 0.00252857854446, 0.445016117028),
        (5, 10, 0.187086028447, 0.812913971553),
        (2, 25, 0.0098395900188, 0.260305842105),
        (50, 100, 0.398321129503, 0.601678870497),
        (97, 100, 0.914823947026, 0.993770028462),
        # fractional sums (TruthfulQA-MC2's probabilities, partial credit)
        (2.6, 8, 0.0614317251978, 0.715504906629),
        (0.37, 5, 6.40287556315e-6, 0.603033480467),
        (62.25, 100, 0.520003701056, 0.717536715449),
    ],
)
def test_score_interval_known_values(total, n, low, high):
    assert score_interval(total, n) == pytest.approx((low, high), rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 100, 10_000])
def test_score_interval_closed_forms_at_the_ends(n):
    assert score_interval(0, n) == (0.0, pytest.approx(1 - 0.025 ** (1 / n), rel=1e-12))
    assert score_interval(n, n) == (pytest.approx(0.025 ** (1 / n), rel=1e-12), 1.0)


def test_score_interval_is_never_a_point_and_holds_the_mean():
    for n in (1, 2, 3, 8, 40, 1000):
        previous = (-1.0, -1.0)
        for tenth in range(10 * n + 1):
            total = tenth / 10
            low, high = score_interval(total, n)
            assert 0.0 <= low <= total / n <= high <= 1.0
            assert high - low > 0.0
            assert low >= previous[0] and high >= previous[1]  # more right: higher
            previous = (low, high)


def test_score_interval_narrows_with_more_samples():
    widths = [score_interval(0.3 * n, n) for n in (4, 16, 64, 256, 1024)]
    assert [h - lo for lo, h in widths] == sorted((h - lo for lo, h in widths), reverse=True)


def test_score_interval_clamps_the_sum_and_needs_a_sample():
    assert score_interval(-1e-15, 4) == score_interval(0, 4)
    assert score_interval(4 + 1e-12, 4) == score_interval(4, 4)
    for n in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="at least one sample"):
            score_interval(0, n)


# --- the combination -------------------------------------------------------------------


def test_combined_interval_of_one_part_is_its_own():
    assert combined_interval([(2.0, 0.4, 0.1, 0.8)]) == pytest.approx((0.1, 0.8), abs=1e-15)


def test_combined_interval_is_the_mover_formula():
    parts = [(1.0, 0.0, 0.0, 0.52), (3.0, 0.5, 0.4, 0.6)]
    low, high = combined_interval(parts)
    mean = 0.25 * 0.0 + 0.75 * 0.5
    assert low == pytest.approx(mean - math.sqrt((0.75 * 0.1) ** 2))
    assert high == pytest.approx(mean + math.sqrt((0.25 * 0.52) ** 2 + (0.75 * 0.1) ** 2))
    # within the weighted means of the parts' limits
    assert low >= 0.25 * 0.0 + 0.75 * 0.4 and high <= 0.25 * 0.52 + 0.75 * 0.6


def test_combined_interval_with_a_negative_weight_swaps_its_sides():
    low, high = combined_interval([(2.0, 0.5, 0.4, 0.7), (-1.0, 0.2, 0.1, 0.3)])
    assert low == pytest.approx(0.8 - math.sqrt((2 * 0.1) ** 2 + 0.1**2))
    assert high == pytest.approx(min(1.0, 0.8 + math.sqrt((2 * 0.2) ** 2 + 0.1**2)))


def test_combined_interval_needs_positive_weights():
    for parts in ([], [(0.0, 0.5, 0.4, 0.6)]):
        with pytest.raises(ValueError, match="positive weights"):
            combined_interval(parts)


@pytest.mark.parametrize(
    ("x", "a", "b", "want"),
    [
        # symmetric: one half at the middle (7e-13 off before the Stirling form)
        (0.5, 626.75, 626.75, 0.5),
        (0.5, 10.0, 10.0, 0.5),
        # mpmath's betainc at 40 digits
        (0.00277265895913926, 4.253571780489945, 1686.3349917764601, 0.6422159385563813),
        (0.992464536565177, 1192.1932952389989, 9.406464685964856, 0.5034324431726858),
    ],
)
def test_large_shapes_keep_full_precision(x, a, b, want):
    assert regularized_beta(x, a, b) == pytest.approx(want, abs=2e-14)
