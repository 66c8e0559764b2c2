"""core/measurement_check.py: quantities per result, statistics per hardware class,
energy flags within a class only."""

from __future__ import annotations

import math

import pytest

from quorumbench.core.efficiency import ClassStats
from quorumbench.core.measurement_check import ENERGY, Measured, cross_check, quantities

CPU = "cpu:amd-epyc-7b13:2c"
GPU = "gpu:nvidia-h100-80gb-hbm3"


def _m(i, cls, kwh, n=10, **more):
    return Measured(i, cls, n, {"energy_kwh": kwh, "energy_method": "rapl", **more})


@pytest.mark.parametrize(
    ("measurements", "n", "expected"),
    [
        ({"energy_kwh": 2e-3, "energy_method": "nvml"}, 4, {ENERGY: 5e-4}),
        ({"energy_kwh": 2e-3, "energy_method": "none"}, 4, {}),
        ({"energy_kwh": 2e-3}, 0, {}),  # no samples: no energy per sample
        ({"energy_kwh": None, "ttft_s": 0.2}, 4, {"ttft_s": 0.2}),
        (
            {"decode_tokens_per_s": 30, "peak_rss_bytes": 10**9, "wall_s": 3.0},
            4,
            {"decode_tokens_per_s": 30.0, "peak_rss_bytes": 1e9},
        ),
        ({"ttft_s": math.inf, "decode_tokens_per_s": -1.0, "peak_rss_bytes": True}, 4, {}),
        ({"ttft_s": "0.2", "energy_kwh": math.nan}, 4, {}),
        ({}, 4, {}),
    ],
)
def test_quantities_keep_only_usable_numbers(measurements, n, expected):
    assert quantities(measurements, n) == expected


def test_ten_times_the_energy_of_its_class_is_flagged():
    (check,) = cross_check([_m(1, CPU, 1e-3), _m(2, CPU, 1e-3), _m(3, CPU, 1e-2)], 3.0)
    assert check.hardware_class == CPU and check.n == 3
    assert check.flagged == frozenset({3})
    assert check.stats == {ENERGY: ClassStats(CPU, 3, 1e-4, 0.0)}


def test_a_tenth_of_the_energy_is_flagged_too():
    (check,) = cross_check([_m(1, CPU, 1e-3), _m(2, CPU, 1e-3), _m(3, CPU, 1e-4)], 3.0)
    assert check.flagged == frozenset({3})


def test_within_the_factor_nothing_is_flagged():
    (check,) = cross_check([_m(1, CPU, 1e-3), _m(2, CPU, 1e-3), _m(3, CPU, 2.9e-3)], 3.0)
    assert check.flagged == frozenset()
    assert check.stats[ENERGY].spread == pytest.approx(0.0)


def test_classes_are_not_compared_and_a_class_of_one_never_flags():
    checks = cross_check([_m(1, CPU, 1e-3), _m(2, CPU, 1e-3), _m(3, GPU, 1e-1)], 3.0)
    assert [(c.hardware_class, c.n, c.flagged) for c in checks] == [
        (CPU, 2, frozenset()),
        (GPU, 1, frozenset()),
    ]
    assert checks[1].stats[ENERGY].median == pytest.approx(1e-2)


def test_unknown_machines_are_left_out():
    checks = cross_check([_m(1, "unknown", 1e-3), _m(2, "unknown", 1.0), _m(3, CPU, 1.0)], 3.0)
    assert [(c.hardware_class, c.n, c.flagged) for c in checks] == [(CPU, 1, frozenset())]


def test_each_quantity_has_its_own_statistics():
    results = [
        _m(1, CPU, 1e-3, ttft_s=0.1, decode_tokens_per_s=40.0),
        _m(2, CPU, 2e-3, ttft_s=0.3),
        Measured(3, CPU, 10, {"energy_method": "none", "ttft_s": 0.2, "peak_rss_bytes": 5}),
    ]
    (check,) = cross_check(results, 3.0)
    assert check.n == 3 and check.flagged == frozenset()
    assert check.stats[ENERGY] == ClassStats(CPU, 2, pytest.approx(1.5e-4), pytest.approx(5e-5))
    assert check.stats["ttft_s"] == ClassStats(CPU, 3, 0.2, pytest.approx(0.1))
    assert check.stats["decode_tokens_per_s"] == ClassStats(CPU, 1, 40.0, 0.0)
    assert check.stats["peak_rss_bytes"] == ClassStats(CPU, 1, 5.0, 0.0)


def test_nothing_measured_gives_no_classes():
    assert cross_check([], 3.0) == []


@pytest.mark.parametrize("factor", [1.0, 0.5, math.nan])
def test_the_factor_must_exceed_one(factor):
    with pytest.raises(ValueError, match="greater than 1"):
        cross_check([], factor)
