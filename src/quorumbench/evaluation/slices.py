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


DRAW_CHUNK = 64
"""Samples built at a time while walking the draw order (a generated benchmark builds
each item from its id, about 0.1 ms each: its 100,000-item pool whole took 10 s)."""


def draw_slice(
    plan: Plan,
    benchmarks: Mapping[str, Benchmark],
    pillars: Mapping[str, str | None],
    limit: int,
    seed: str,
) -> list[SliceSample]:
    """At most ``limit`` samples of the plan's slice, drawn by ``seed`` (module doc),
    in draw order.

    The draw order is every sample id of the covered benchmarks sorted by its key; the
    slice is the samples in that order whose labels the plan matches, so samples are
    built (their labels read) in order, a chunk at a time, only until ``limit`` match.
    """
    keyed = [
        (sha256_hex(f"{seed}\t{name}\t{sample_id}"), name, sample_id)
        for name in sorted(benchmarks)
        if plan.covers_benchmark(name, pillars.get(name))
        for sample_id in benchmarks[name].sample_ids()
    ]
    keyed.sort()
    drawn: list[SliceSample] = []
    for start in range(0, len(keyed), DRAW_CHUNK):
        if len(drawn) >= limit:
            break
        chunk = keyed[start : start + DRAW_CHUNK]
        built: dict[tuple[str, str], Sample] = {}
        for name in sorted({name for _, name, _ in chunk}):
            ids = [sample_id for _, other, sample_id in chunk if other == name]
            samples = benchmarks[name].samples(ids)  # in the order of ids
            built.update(((name, i), s) for i, s in zip(ids, samples, strict=True))
        for _, name, sample_id in chunk:
            sample = built[(name, sample_id)]
            if len(drawn) < limit and plan.matches(sample.labels.as_dict()):
                drawn.append(SliceSample(benchmarks[name], sample))
    return drawn
