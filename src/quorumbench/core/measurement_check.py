"""Cross-checking the measurements of a DONE task's agreeing results (pure).

The server (``services/measurement_check.py``) hands over each agreeing result that
carried measurements: its id, hardware class (``efficiency.hardware_class``), sample
count and ``protocol.Measurements`` as stored. Per hardware class this gives the median
and spread (median absolute deviation) of four quantities, each over the results that
measured it, and the results whose energy per sample is more than ``factor`` off their
class's median (``efficiency.outliers``: classes of one never flag).

Results of the class ``unknown`` (no GPU and no CPU model known) are left out: two
unknown machines are not known to be alike. A value that is missing, not a finite
non-negative number, or an energy taken with method ``none`` is left out of that
quantity (a runner's bad number must never stop its task from finalizing).

Hardware data only: nothing here is read by consensus, scores or reputation.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quorumbench.core.efficiency import ClassStats, class_stats, outliers

UNKNOWN_CLASS = "unknown"
ENERGY = "energy_kwh_per_sample"
QUANTITIES = (ENERGY, "decode_tokens_per_s", "ttft_s", "peak_rss_bytes")
"""What is compared per class, in ``task_measurements``' column order."""


@dataclass(frozen=True)
class Measured:
    """One agreeing result with measurements."""

    result_id: int
    hardware_class: str
    n_samples: int
    measurements: Mapping[str, Any]


@dataclass(frozen=True)
class ClassCheck:
    """One hardware class on one task: its measured results (``n``), the statistics of
    each quantity some of them measured, and the flagged result ids."""

    hardware_class: str
    n: int
    stats: dict[str, ClassStats]
    flagged: frozenset[int]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def quantities(measurements: Mapping[str, Any], n_samples: int) -> dict[str, float]:
    """The quantities one result measured: energy per sample (``energy_kwh / n``, unless
    the method is ``none`` or there are no samples), decode tokens/s, TTFT (s) and peak
    RSS (bytes); anything missing or unusable is absent."""
    out: dict[str, float] = {}
    energy = _number(measurements.get("energy_kwh"))
    if energy is not None and measurements.get("energy_method") != "none" and n_samples > 0:
        out[ENERGY] = energy / n_samples
    for name in QUANTITIES[1:]:
        value = _number(measurements.get(name))
        if value is not None:
            out[name] = value
    return out


def cross_check(results: Sequence[Measured], factor: float) -> list[ClassCheck]:
    """Per hardware class (sorted by name; ``unknown`` left out): statistics of each
    quantity and the results whose energy per sample is more than ``factor`` above or
    below the class median. Raises ValueError unless ``factor > 1``."""
    if not factor > 1:  # also when no class has energy to compare
        raise ValueError(f"the outlier factor must be greater than 1, got {factor}")
    members: dict[str, int] = {}
    values: dict[str, dict[str, list[float]]] = {}
    energy: dict[Hashable, tuple[str, float]] = {}
    for result in results:
        cls = result.hardware_class
        if cls == UNKNOWN_CLASS:
            continue
        members[cls] = members.get(cls, 0) + 1
        measured = quantities(result.measurements, result.n_samples)
        for name, value in measured.items():
            values.setdefault(cls, {}).setdefault(name, []).append(value)
        if ENERGY in measured:
            energy[result.result_id] = (cls, measured[ENERGY])
    flagged = outliers(energy, factor)
    return [
        ClassCheck(
            cls,
            n,
            {
                name: class_stats({cls: measured})[cls]
                for name, measured in values.get(cls, {}).items()
            },
            frozenset(i for i in flagged if isinstance(i, int) and energy[i][0] == cls),
        )
        for cls, n in sorted(members.items())
    ]
