import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.efficiency import (
    CARBON_INTENSITY_G_PER_KWH,
    MAX_G_PER_KWH,
    WORLD_AVERAGE_G_PER_KWH,
    ClassStats,
    MeanSd,
    carbon_intensity,
    class_stats,
    co2_grams,
    decode_rate,
    energy_from_counters,
    energy_from_power,
    estimate_energy_j,
    hardware_class,
    joules_to_kwh,
    mean_sd,
    median,
    outliers,
)

finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)

# --- energy ----------------------------------------------------------------------------------


def test_counter_without_wraparound():
    assert energy_from_counters(1_000_000, 3_500_000, 10_000_000) == 2.5


def test_counter_wraps_once():
    # 9.0 J left before the wrap at 10 J, then 0.5 J after it
    assert energy_from_counters(1_000_000, 500_000, 10_000_000) == pytest.approx(9.5)


def test_counter_unchanged_is_zero():
    assert energy_from_counters(42, 42, 100) == 0.0


@pytest.mark.parametrize(
    ("start", "end", "max_range", "message"),
    [
        (0, 1, 0, "max_range_uj must be positive"),
        (-1, 5, 10, "start_uj must lie in"),
        (5, 11, 10, "end_uj must lie in"),
    ],
)
def test_counter_rejects_bad_readings(start, end, max_range, message):
    with pytest.raises(ValueError, match=message):
        energy_from_counters(start, end, max_range)


def test_trapezoid_with_uneven_spacing():
    # 0–1 s: 10→20 W (15 J); 1–4 s: 20→20 W (60 J); 4–4.5 s: 20→0 W (5 J)
    samples = [(0.0, 10.0), (1.0, 20.0), (4.0, 20.0), (4.5, 0.0)]
    assert energy_from_power(samples) == pytest.approx(80.0)


def test_trapezoid_allows_repeated_times():
    assert energy_from_power([(0.0, 5.0), (2.0, 5.0), (2.0, 100.0)]) == 10.0


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([], "at least two"),
        ([(0.0, 5.0)], "at least two"),
        ([(1.0, 5.0), (0.5, 5.0)], "must not go backwards"),
        ([(0.0, 5.0), (1.0, -1.0)], "power must not be negative"),
        ([(0.0, math.nan), (1.0, 1.0)], "power must be a finite number"),
        ([(0.0, 1.0), (math.inf, 1.0)], "time must be a finite number"),
    ],
)
def test_trapezoid_rejects_bad_samples(samples, message):
    with pytest.raises(ValueError, match=message):
        energy_from_power(samples)


@given(
    st.lists(st.tuples(st.floats(min_value=0.001, max_value=100), finite), min_size=3, max_size=30),
    st.data(),
)
def test_energy_from_power_is_additive_over_split_intervals(steps, data):
    t, samples = 0.0, []
    for dt, watts in steps:
        t += dt
        samples.append((t, watts))
    k = data.draw(st.integers(min_value=1, max_value=len(samples) - 2))
    whole = energy_from_power(samples)
    parts = energy_from_power(samples[: k + 1]) + energy_from_power(samples[k:])
    assert parts == pytest.approx(whole, rel=1e-9, abs=1e-6)


def test_estimate_scales_tdp_by_utilisation():
    # 4 cores busy for 30 CPU-seconds over 10 s: 75% of 100 W for 10 s
    assert estimate_energy_j(100.0, 30.0, 10.0, 4) == pytest.approx(750.0)


def test_estimate_caps_utilisation_at_one():
    assert estimate_energy_j(65.0, 50.0, 10.0, 2) == pytest.approx(650.0)


def test_estimate_of_no_time_is_zero():
    assert estimate_energy_j(65.0, 0.0, 0.0, 8) == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1.0, 1.0, 1.0, 1), "tdp_w must not be negative"),
        ((10.0, -1.0, 1.0, 1), "cpu_seconds must not be negative"),
        ((10.0, 1.0, math.inf, 1), "wall_s must be a finite number"),
        ((10.0, 1.0, 1.0, 0), "cores must be at least 1"),
    ],
)
def test_estimate_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        estimate_energy_j(*args)


def test_joules_to_kwh():
    assert joules_to_kwh(3_600_000.0) == 1.0
    assert joules_to_kwh(1800.0) == 0.0005


# --- carbon ----------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [None, "", "   "])
def test_no_setting_is_the_world_average(setting):
    assert carbon_intensity(setting) == (WORLD_AVERAGE_G_PER_KWH, "world-average")


def test_world_average_is_the_2024_figure():
    assert WORLD_AVERAGE_G_PER_KWH == 471.08


@pytest.mark.parametrize("setting", ["US", "us", " Us "])
def test_country_code_in_either_case(setting):
    assert carbon_intensity(setting) == (383.78, "country:US")


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("GB", 216.5),
        ("SE", 34.91),
        ("CH", 34.58),
        ("ES", 146.22),
        ("AU", 553.83),
        ("DE", 336.38),
        ("FI", 66.63),
        ("FR", 40.48),
        ("IN", 705.4),
        ("IT", 281.4),
        ("JP", 483.43),
        ("KR", 415.51),
        ("NL", 250.72),
        ("NO", 29.66),
    ],
)
def test_country_figures(code, value):
    assert carbon_intensity(code) == (value, f"country:{code}")


@pytest.mark.parametrize(
    ("code", "value"),
    [("BR", 106.06), ("CA", 185.35), ("CN", 555.4), ("PL", 608.18), ("SG", 498.74)],
)
def test_added_country_figures(code, value):
    """Brazil, Canada, China, Poland and Singapore: ``carbon_intensity_elec`` of their
    2024 rows in owid-energy-data.csv (106.060, 185.350, 555.400, 608.180, 498.740)."""
    assert CARBON_INTENSITY_G_PER_KWH[code] == value
    assert carbon_intensity(code.lower()) == (value, f"country:{code}")


def test_table_is_sorted_by_code():
    assert list(CARBON_INTENSITY_G_PER_KWH) == sorted(CARBON_INTENSITY_G_PER_KWH)


def test_table_has_the_volunteer_countries():
    assert {"CH", "ES", "GB", "SE", "US"} <= set(CARBON_INTENSITY_G_PER_KWH)
    assert all(0 < v < MAX_G_PER_KWH for v in CARBON_INTENSITY_G_PER_KWH.values())


@pytest.mark.parametrize(
    ("setting", "value"),
    [("350", 350.0), ("350g", 350.0), ("350 G", 350.0), ("56.2 g/kWh", 56.2), (".5", 0.5)],
)
def test_number_setting(setting, value):
    assert carbon_intensity(setting) == (value, "setting")


def test_number_setting_limits():
    assert carbon_intensity("0") == (0.0, "setting")
    assert carbon_intensity("2000") == (2000.0, "setting")
    with pytest.raises(ValueError, match="not kilograms"):
        carbon_intensity("2000.5")


@pytest.mark.parametrize("setting", ["XX", "france", "-5", "350kg", "3,5", "nan"])
def test_bad_setting_says_how_to_give_a_number(setting):
    with pytest.raises(ValueError, match="unknown carbon intensity setting") as err:
        carbon_intensity(setting)
    assert "'350'" in str(err.value) and "US" in str(err.value)


def test_co2_grams():
    assert co2_grams(0.5, 400.0) == 200.0
    assert co2_grams(0.0, 400.0) == 0.0


@pytest.mark.parametrize(("kwh", "g"), [(-1.0, 1.0), (1.0, -1.0), (math.nan, 1.0)])
def test_co2_rejects_bad_input(kwh, g):
    with pytest.raises(ValueError):
        co2_grams(kwh, g)


@given(finite, finite, st.floats(min_value=0, max_value=2000))
def test_co2_is_linear_in_kwh(a, b, g):
    assert co2_grams(a + b, g) == pytest.approx(co2_grams(a, g) + co2_grams(b, g), rel=1e-9)
    assert co2_grams(2 * a, g) == pytest.approx(2 * co2_grams(a, g), rel=1e-12)


# --- decode rate -----------------------------------------------------------------------------


def test_decode_rate_counts_tokens_after_the_first_per_sequence():
    # 4 sequences, 132 tokens: 128 after each one's first, in 2 s
    assert decode_rate(132, 4, 10.0, 12.0) == 64.0


@pytest.mark.parametrize(
    ("tokens", "sequences", "first", "end"),
    [
        (10, 0, 0.0, 1.0),  # no sequences
        (4, 4, 0.0, 1.0),  # only first tokens
        (3, 4, 0.0, 1.0),  # some sequence gave nothing
        (10, 1, 2.0, 2.0),  # no time to measure
        (10, 1, 2.0, 1.0),  # end before first token
    ],
)
def test_decode_rate_is_none_when_not_measurable(tokens, sequences, first, end):
    assert decode_rate(tokens, sequences, first, end) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 1, 0.0, 1.0), "must not be negative"),
        ((1, -1, 0.0, 1.0), "must not be negative"),
        ((5, 1, math.nan, 1.0), "first_token_at must be a finite number"),
        ((5, 1, 0.0, math.inf), "end_at must be a finite number"),
    ],
)
def test_decode_rate_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        decode_rate(*args)


# --- median, classes, outliers, mean/sd ------------------------------------------------------


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


@pytest.mark.parametrize(("values", "message"), [([], "no values"), ([1.0, math.nan], "finite")])
def test_median_rejects_bad_input(values, message):
    with pytest.raises(ValueError, match=message):
        median(values)


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (
            {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_count": 8},
            "cpu:intel-xeon-platinum-8480plus:8c",
        ),
        (
            {"processor": "x86_64", "cpu_model": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 2},
            "cpu:amd-epyc-7b13:2c",
        ),
        ({"cpu_model": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu_count": 4}, "cpu:intel-xeon:4c"),
        (
            {"cpu_model": "Intel(R) Core(TM) i7-10700K CPU @ 3.80GHz", "cpu_count": 16},
            "cpu:intel-core-i7-10700k:16c",
        ),
        (
            {"processor": "arm", "cpu_model": "Apple M2 Pro", "cpu_count": 12},
            "cpu:apple-m2-pro:12c",
        ),
        ({"processor": "Apple M2 Pro"}, "cpu:apple-m2-pro"),
        ({"cpu_model": "AMD  Ryzen™ 9   7950X", "cpu_count": 0}, "cpu:amd-ryzen-9-7950x"),
        (
            {"cpu_model": "AMD EPYC 7B13", "cpu_count": 2, "gpu_name": "NVIDIA H100 80GB HBM3"},
            "gpu:nvidia-h100-80gb-hbm3",
        ),
        ({"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "gpu:nvidia-h100-80gb-hbm3"),
        ({"gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_count": 2}, "gpu:2x-nvidia-a100-sxm4-80gb"),
        ({"gpu_name": "Tesla T4", "gpu_count": None}, "gpu:tesla-t4"),
        ({"gpu_name": "NVIDIA GeForce RTX 4090", "gpu_count": True}, "gpu:nvidia-geforce-rtx-4090"),
        ({"gpu_name": "", "processor": "x86_64", "cpu_count": 8}, "unknown"),
        ({"cpu_model": "(R)", "processor": "i386"}, "unknown"),
        ({}, "unknown"),
    ],
)
def test_hardware_class(machine, expected):
    assert hardware_class(machine) == expected


def test_class_stats_median_and_mad():
    stats = class_stats({"gpu:a": [1.0, 2.0, 3.0, 10.0], "cpu:b:2c": [5.0]})
    assert stats["gpu:a"] == ClassStats("gpu:a", 4, 2.5, 1.0)
    assert stats["cpu:b:2c"] == ClassStats("cpu:b:2c", 1, 5.0, 0.0)


def test_class_stats_rejects_an_empty_class():
    with pytest.raises(ValueError, match="'gpu:a' has no values"):
        class_stats({"gpu:a": []})


def test_outliers_flag_a_factor_off_the_class_median():
    values = {
        "r1": ("gpu:a", 1.0),
        "r2": ("gpu:a", 1.1),
        "r3": ("gpu:a", 0.9),
        "hot": ("gpu:a", 3.5),  # > 3 × median 1.05
        "cold": ("gpu:a", 0.3),  # < median / 3
        "alone": ("cpu:b:2c", 100.0),
    }
    assert outliers(values, 3.0) == {"hot", "cold"}


def test_outliers_with_a_zero_median_flag_positive_values():
    values = {1: ("c", 0.0), 2: ("c", 0.0), 3: ("c", 2.0)}
    assert outliers(values, 2.0) == {3}


@pytest.mark.parametrize(
    ("values", "factor", "message"),
    [
        ({}, 1.0, "greater than 1"),
        ({}, math.nan, "finite"),
        ({1: ("c", -1.0)}, 2.0, "must not be negative"),
    ],
)
def test_outliers_reject_bad_input(values, factor, message):
    with pytest.raises(ValueError, match=message):
        outliers(values, factor)


@given(
    st.floats(min_value=0, max_value=1e9),
    st.integers(min_value=1, max_value=20),
    st.floats(min_value=1.0001, max_value=100),
)
def test_outliers_never_flag_a_class_of_identical_values(value, n, factor):
    assert outliers({i: ("cls", value) for i in range(n)}, factor) == set()


def test_mean_sd():
    assert mean_sd([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == MeanSd(
        5.0, pytest.approx(2.138089935299395), 8
    )
    assert mean_sd([3.5]) == MeanSd(3.5, 0.0, 1)


@pytest.mark.parametrize(("values", "message"), [([], "no values"), ([math.inf], "finite")])
def test_mean_sd_rejects_bad_input(values, message):
    with pytest.raises(ValueError, match=message):
        mean_sd(values)


@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    st.integers(min_value=1, max_value=50),
)
def test_mean_sd_of_constants_has_sd_zero(value, n):
    result = mean_sd([value] * n)
    assert result == MeanSd(value, 0.0, n)
