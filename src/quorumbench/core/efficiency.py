"""Energy, CO₂, decode speed and hardware classes: the arithmetic behind a result's
measurements (pure; issue 18, docs/efficiency.md).

Units: joules (J) inside the runner, kilowatt-hours (kWh) on the wire
(1 kWh = 3.6 × 10⁶ J), grams of CO₂ equivalents (g), seconds (s), watts (W), bytes.

* :func:`energy_from_counters`: two readings of a cumulative energy counter in
  microjoules (Linux powercap/RAPL ``energy_uj``) → J, allowing one wraparound.
* :func:`energy_from_power`: power samples ``(t_s, W)`` → J by the trapezoid rule
  (NVML reports power, not energy, on older GPUs).
* :func:`estimate_energy_j`: no meter readable → ``TDP × utilisation × wall time``,
  the shape of CodeCarbon's CPU fallback. An estimate, always labelled ``estimate``.
* :func:`carbon_intensity` and :func:`co2_grams`: g CO₂e/kWh from a setting (a country
  code, a number, or the world average) and ``g = kWh × g/kWh``.
* :func:`decode_rate`: generated tokens after each sequence's first, per second of
  decoding.
* :func:`hardware_class`: a machine's normalised class string, the group inside which
  measurements are compared; :func:`class_stats` (median and median absolute
  deviation per class), :func:`outliers` (more than a factor off the class median) and
  :func:`mean_sd` (an edge run's repeated measurements).

None of this ranks models: hardware-dependent numbers are shown beside the ranking,
never in it, and an outlier flag changes neither score consensus nor reputation.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JOULES_PER_KWH = 3_600_000.0
"""1 kWh = 1000 W × 3600 s."""

CARBON_INTENSITY_YEAR = 2024
CARBON_INTENSITY_SOURCE = (
    "Ember, Yearly Electricity Data, via Our World in Data's energy dataset "
    "(github.com/owid/energy-data, owid-energy-data.csv, column carbon_intensity_elec: "
    "lifecycle g CO2e per kWh generated), year 2024"
)

WORLD_AVERAGE_G_PER_KWH: float = 471.08
"""The world's electricity generation in 2024: 471.08 g CO₂e/kWh (Ember, Yearly
Electricity Data, via Our World in Data's energy dataset, ``carbon_intensity_elec`` of
"World", 2024). The default when a runner sets no carbon intensity."""

CARBON_INTENSITY_G_PER_KWH: Mapping[str, float] = {
    "AU": 553.83,
    "BR": 106.06,
    "CA": 185.35,
    "CH": 34.58,
    "CN": 555.40,
    "DE": 336.38,
    "ES": 146.22,
    "FI": 66.63,
    "FR": 40.48,
    "GB": 216.50,
    "IN": 705.40,
    "IT": 281.40,
    "JP": 483.43,
    "KR": 415.51,
    "NL": 250.72,
    "NO": 29.66,
    "PL": 608.18,
    "SE": 34.91,
    "SG": 498.74,
    "US": 383.78,
}
"""Carbon intensity of electricity generation by ISO 3166-1 alpha-2 code, in g CO₂e per
kWh, for 2024 (see ``CARBON_INTENSITY_SOURCE``): lifecycle emissions per kWh generated
in the country (imports are not counted; a grid's hourly and regional intensity can be
far from its yearly national mean, so a runner that knows its own number should set it).
Each figure is the dataset's value for the country and year, rounded to 0.01 g; a
country not listed is given as a number (its grid operator's or Ember's figure).
"""

MAX_G_PER_KWH = 2000.0
"""The largest intensity a setting may give: no national grid is above about 1,100
g CO₂e/kWh (all-coal generation), so a larger number is a typo (kg for g, or a missing
decimal point)."""

_NUMBER = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?:g|g/kwh)?$", re.IGNORECASE)


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if _finite(name, value) < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return float(value)


def energy_from_counters(start_uj: int, end_uj: int, max_range_uj: int) -> float:
    """Joules between two readings of a cumulative microjoule counter (RAPL's
    ``energy_uj``), which counts up from 0 and wraps to 0 after ``max_range_uj``
    (``max_energy_range_uj``).

    ``end ≥ start``: ``(end − start) / 10⁶``. ``end < start``: the counter wrapped once,
    ``(max_range − start + end) / 10⁶``. More than one wrap between the readings cannot
    be seen (it undercounts by ``max_range`` per extra wrap, about 262 kJ on most Intel
    packages: over 40 minutes at 100 W), so a caller reading longer runs reads the
    counter more often and sums the steps.

    Raises ValueError unless ``max_range_uj > 0`` and both readings lie in
    ``[0, max_range_uj]``.
    """
    if max_range_uj <= 0:
        raise ValueError(f"max_range_uj must be positive, got {max_range_uj}")
    for name, value in (("start_uj", start_uj), ("end_uj", end_uj)):
        if not 0 <= value <= max_range_uj:
            raise ValueError(f"{name} must lie in [0, {max_range_uj}], got {value}")
    delta = end_uj - start_uj if end_uj >= start_uj else max_range_uj - start_uj + end_uj
    return delta / 1_000_000


def energy_from_power(samples: Sequence[tuple[float, float]]) -> float:
    """Joules from power samples ``(t_seconds, watts)`` by the trapezoid rule:
    ``Σ (t[i+1] − t[i]) × (W[i] + W[i+1]) / 2``, for any spacing of the times.

    The power between two samples is taken to move linearly from one to the other;
    spikes shorter than the sampling interval are missed, so sample at least every
    100 ms for a figure within a few percent. The integral is additive: splitting the
    samples at a shared sample gives two parts that sum to the whole.

    Raises ValueError for fewer than two samples (no time has passed: there is nothing
    to integrate, and 0 J would be an invented reading), times that go backwards, a
    negative power, or a value that is not finite.
    """
    if len(samples) < 2:
        raise ValueError(f"need at least two power samples to integrate, got {len(samples)}")
    total = 0.0
    prev_t, prev_w = (_finite("time", samples[0][0]), _non_negative("power", samples[0][1]))
    for t, w in samples[1:]:
        t, w = _finite("time", t), _non_negative("power", w)
        if t < prev_t:
            raise ValueError(f"power sample times must not go backwards ({t} after {prev_t})")
        total += (t - prev_t) * (prev_w + w) / 2
        prev_t, prev_w = t, w
    return total


def estimate_energy_j(tdp_w: float, cpu_seconds: float, wall_s: float, cores: int) -> float:
    """Estimated joules when no meter is readable: ``TDP × utilisation × wall time``,
    with ``utilisation = cpu_seconds / (wall_s × cores)`` capped at 1 (the process's CPU
    time over the time all cores could have given it). Equivalently
    ``TDP × min(cpu_seconds / cores, wall_s)``; 0 when ``wall_s`` is 0.

    An estimate, not a measurement: TDP is a thermal design figure, real package power
    at full load can be well above or below it, and idle power, memory and GPUs are
    left out. Results carry the method ``estimate``.

    Raises ValueError unless ``tdp_w``, ``cpu_seconds`` and ``wall_s`` are finite and
    non-negative and ``cores ≥ 1``.
    """
    tdp_w = _non_negative("tdp_w", tdp_w)
    cpu_seconds = _non_negative("cpu_seconds", cpu_seconds)
    wall_s = _non_negative("wall_s", wall_s)
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    if wall_s == 0:
        return 0.0
    utilisation = min(1.0, cpu_seconds / (wall_s * cores))
    return tdp_w * utilisation * wall_s


def joules_to_kwh(j: float) -> float:
    """``j / 3.6 × 10⁶``: joules to kilowatt-hours."""
    return j / JOULES_PER_KWH


def carbon_intensity(setting: str | None) -> tuple[float, str]:
    """The carbon intensity (g CO₂e/kWh) a setting names, and where it came from.

    * ``None`` or blank → ``(WORLD_AVERAGE_G_PER_KWH, "world-average")``;
    * a two-letter country code in ``CARBON_INTENSITY_G_PER_KWH``, either case
      (``"FR"``, ``"fr"``) → ``(that country's 2024 figure, "country:FR")``;
    * a number of grams per kWh, optionally followed by ``g`` or ``g/kWh``
      (``"350"``, ``"350g"``, ``"56.2 g/kWh"``) → ``(350.0, "setting")``; it must lie in
      ``[0, MAX_G_PER_KWH]``.

    Raises ValueError for anything else, saying which codes are known and how to give
    a number instead.
    """
    text = (setting or "").strip()
    if not text:
        return WORLD_AVERAGE_G_PER_KWH, "world-average"
    code = text.upper()
    if code in CARBON_INTENSITY_G_PER_KWH:
        return CARBON_INTENSITY_G_PER_KWH[code], f"country:{code}"
    match = _NUMBER.match(text)
    if match:
        value = float(match.group(1))
        if value > MAX_G_PER_KWH:
            raise ValueError(
                f"carbon intensity {text!r} is above {MAX_G_PER_KWH:g} g CO2/kWh; "
                "give grams (not kilograms) per kWh, e.g. '350'"
            )
        return value, "setting"
    known = ", ".join(sorted(CARBON_INTENSITY_G_PER_KWH))
    raise ValueError(
        f"unknown carbon intensity setting {text!r}: give a country code ({known}), "
        "or your grid's number of grams of CO2 per kWh, e.g. '350' or '350g', "
        "or leave it empty for the world average"
    )


def co2_grams(kwh: float, g_per_kwh: float) -> float:
    """Grams of CO₂e: ``kwh × g_per_kwh``. Raises ValueError for a negative or
    non-finite input."""
    return _non_negative("kwh", kwh) * _non_negative("g_per_kwh", g_per_kwh)


def decode_rate(
    generated_tokens: int, sequences: int, first_token_at: float, end_at: float
) -> float | None:
    """Decode speed in tokens per second:
    ``(generated_tokens − sequences) / (end_at − first_token_at)``.

    Each of the ``sequences`` decoded together counts its first token in the time to
    first token (prefill), so only the tokens after it are decode work, done between
    the first token (``first_token_at``, seconds) and the end (``end_at``, seconds, on
    the same clock). ``None`` when there is nothing to measure: no sequences, no token
    after the first ones, or no time between first token and end (a clock that cannot
    tell them apart gives no rate rather than an infinite one).

    Raises ValueError for negative counts or a time that is not finite.
    """
    if generated_tokens < 0 or sequences < 0:
        raise ValueError(
            f"token and sequence counts must not be negative, got {generated_tokens}, {sequences}"
        )
    elapsed = _finite("end_at", end_at) - _finite("first_token_at", first_token_at)
    decoded = generated_tokens - sequences
    if sequences == 0 or decoded <= 0 or elapsed <= 0:
        return None
    return decoded / elapsed


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count). Raises
    ValueError for no values or a value that is not finite."""
    if not values:
        raise ValueError("the median of no values is undefined")
    return float(statistics.median([_finite("value", v) for v in values]))


# --- hardware classes ----------------------------------------------------------------------

_ARCH_ONLY = {"", "x86_64", "amd64", "x86", "i386", "i686", "arm", "arm64", "aarch64", "unknown"}
"""``platform.processor()`` often gives only the architecture: no model to class by."""
_TRADEMARKS = re.compile(r"\((?:r|tm|c)\)|®|™|©", re.IGNORECASE)
_CPU_NOISE = re.compile(
    r"@\s*[0-9.]+\s*[gm]hz|\b[0-9]+-core\b|\bcpu\b|\bprocessor\b", re.IGNORECASE
)
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def _slug(name: str, noise: re.Pattern[str] | None = None) -> str:
    text = _TRADEMARKS.sub(" ", name)
    if noise is not None:
        text = noise.sub(" ", text)
    text = text.lower().replace("+", "plus")
    return _NOT_SLUG.sub("-", text).strip("-")


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def hardware_class(machine: Mapping[str, Any]) -> str:
    """A machine's hardware class: the group its measurements are compared within.

    ``machine`` has ``protocol.Machine``'s keys (``processor``, ``cpu_model``,
    ``cpu_count``, ``gpu_name``, ``gpu_count``); missing keys and ``None`` count as
    absent. Names are normalised to lower-case kebab-case: trademarks (``(R)``,
    ``(TM)``, ``®``, ``™``) dropped, ``+`` spelled ``plus``, every other run of
    characters outside ``a-z0-9`` one ``-``.

    * With a GPU name: ``gpu:<name>``, or ``gpu:<n>x-<name>`` for ``n > 1`` GPUs
      (``"NVIDIA H100 80GB HBM3"`` → ``gpu:nvidia-h100-80gb-hbm3``; two
      ``"NVIDIA A100-SXM4-80GB"`` → ``gpu:2x-nvidia-a100-sxm4-80gb``).
    * Else by CPU model (``cpu_model``, else ``processor`` unless that is only an
      architecture such as ``x86_64`` or ``arm``), with clock speed (``@ 2.20GHz``),
      ``N-Core``, ``CPU`` and ``Processor`` dropped, and the core count:
      ``cpu:<model>:<n>c`` (``"AMD EPYC 7B13 64-Core Processor"`` with 2 cores →
      ``cpu:amd-epyc-7b13:2c``), or ``cpu:<model>`` when the count is unknown.
    * Neither: ``unknown``.
    """
    gpu = _slug(str(machine.get("gpu_name") or ""))
    if gpu:
        count = _count(machine.get("gpu_count")) or 1
        return f"gpu:{count}x-{gpu}" if count > 1 else f"gpu:{gpu}"
    for key in ("cpu_model", "processor"):
        raw = str(machine.get(key) or "").strip()
        if raw.lower() in _ARCH_ONLY:
            continue
        model = _slug(raw, _CPU_NOISE)
        if model:
            cores = _count(machine.get("cpu_count"))
            return f"cpu:{model}:{cores}c" if cores else f"cpu:{model}"
    return "unknown"


# --- cross-checks and repeated runs ----------------------------------------------------------


@dataclass(frozen=True)
class ClassStats:
    """One hardware class's measurements: how many, their median and their spread
    (the median absolute deviation, ``median(|x − median|)``, in the values' unit)."""

    hardware_class: str
    n: int
    median: float
    spread: float


def class_stats(values_by_class: Mapping[str, Sequence[float]]) -> dict[str, ClassStats]:
    """Median and median absolute deviation of each class's values (e.g. the agreeing
    runners' energy per sample). Raises ValueError for a class with no values."""
    stats: dict[str, ClassStats] = {}
    for cls, values in values_by_class.items():
        if not values:
            raise ValueError(f"hardware class {cls!r} has no values")
        mid = median(values)
        spread = median([abs(v - mid) for v in values])
        stats[cls] = ClassStats(cls, len(values), mid, spread)
    return stats


def outliers(values: Mapping[Hashable, tuple[str, float]], factor: float) -> set[Hashable]:
    """The keys whose value is more than ``factor`` away from their class's median:
    ``value > factor × median`` or ``value < median / factor``.

    ``values`` maps a key (a runner, a result) to ``(hardware class, value)``; values
    are non-negative (energy per sample). A class with fewer than two members never
    flags (there is nothing to compare with), and a class of equal values never flags.
    With a median of 0, every positive value is flagged.

    Raises ValueError unless ``factor > 1`` and every value is finite and non-negative.
    """
    factor = _finite("factor", factor)
    if factor <= 1:
        raise ValueError(f"the outlier factor must be greater than 1, got {factor}")
    by_class: dict[str, list[tuple[Hashable, float]]] = {}
    for key, (cls, value) in values.items():
        by_class.setdefault(cls, []).append((key, _non_negative("value", value)))
    flagged: set[Hashable] = set()
    for members in by_class.values():
        if len(members) < 2:
            continue
        mid = median([v for _, v in members])
        flagged.update(k for k, v in members if v > factor * mid or v < mid / factor)
    return flagged


@dataclass(frozen=True)
class MeanSd:
    """Mean and sample standard deviation of ``n`` repeated measurements."""

    mean: float
    sd: float
    n: int


def mean_sd(values: Sequence[float]) -> MeanSd:
    """Mean and sample standard deviation (``n − 1`` in the denominator; 0 for a
    single value), computed exactly (``statistics``), so equal values give sd 0.
    Raises ValueError for no values or a value that is not finite."""
    if not values:
        raise ValueError("the mean of no values is undefined")
    clean = [_finite("value", v) for v in values]
    sd = statistics.stdev(clean) if len(clean) > 1 else 0.0
    return MeanSd(float(statistics.mean(clean)), float(sd), len(clean))
