"""The samples a plan (``core/plans.py``) selects from loaded benchmarks.

Live work for a plan (a person's own endpoint, or deepening a thin slice for public
models) runs on exactly the plan's labelled samples: every sample of a covered
benchmark whose labels the plan matches. When there are more than a budget, the
ones taken are those with the smallest ``SHA-256(seed, benchmark, sample id)``: a
deterministic draw that any server with the same data and seed repeats, pooled over
the benchmarks (so each benchmark contributes in proportion to its matching items).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.plans import Plan
from quorumbench.evaluation.benchmark import Benchmark, Sample


@dataclass(frozen=True)
class SliceSample:
    benchmark: Benchmark
    sample: Sample


def matching_samples(
    plan: Plan, benchmarks: Mapping[str, Benchmark], pillars: Mapping[str, str | None]
) -> dict[str, list[Sample]]:
    """Per benchmark name (sorted), its samples in the plan's slice (none: left out).

    ``pillars`` gives each benchmark's pillar (a benchmark missing there has none,
    so a plan that names pillars leaves it out).
    """
    out: dict[str, list[Sample]] = {}
    for name in sorted(benchmarks):
        if not plan.covers_benchmark(name, pillars.get(name)):
            continue
        bench = benchmarks[name]
        found = [s for s in bench.samples(bench.sample_ids()) if plan.matches(s.labels.as_dict())]
        if found:
            out[name] = found
    return out


def draw_slice(
    plan: Plan,
    benchmarks: Mapping[str, Benchmark],
    pillars: Mapping[str, str | None],
    limit: int,
    seed: str,
) -> list[SliceSample]:
    """At most ``limit`` samples of the plan's slice, drawn by ``seed`` (module doc),
    in draw order."""
    keyed = []
    for name, samples in matching_samples(plan, benchmarks, pillars).items():
        for sample in samples:
            keyed.append((sha256_hex(f"{seed}\t{name}\t{sample.id}"), name, sample))
    keyed.sort(key=lambda item: (item[0], item[1], item[2].id))
    return [SliceSample(benchmarks[name], sample) for _, name, sample in keyed[: max(0, limit)]]
