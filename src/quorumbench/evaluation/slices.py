"""The samples a plan (``core/plans.py``) selects from loaded benchmarks.

Live work for a plan (a person's own endpoint, or deepening a thin slice for public
models) runs on exactly the plan's labelled samples: every sample of a covered
benchmark whose labels the plan matches. When there are more than a budget, the
ones taken are those with the smallest ``SHA-256(seed, benchmark, sample id)``: a
deterministic draw that any server with the same data and seed repeats, pooled over
the benchmarks (so each benchmark contributes in proportion to its matching items).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice

from quorumbench.core.plans import Plan
from quorumbench.evaluation.benchmark import Benchmark, Sample


@dataclass(frozen=True)
class SliceSample:
    benchmark: Benchmark
    sample: Sample


DRAW_CHUNK = 64
"""Samples built at a time while walking the draw order (a generated benchmark builds
each item from its id, about 0.1 ms each: its 100,000-item pool whole took 10 s)."""


class SliceWalk:
    """The plan's slice in draw order (module doc), built only as far as it is read.

    The draw order is every sample id of the covered benchmarks sorted by its key;
    the slice is the samples in that order whose labels the plan matches. Reading
    the first ``n`` builds samples (reads their labels) a chunk at a time until ``n``
    have matched, not every sample of every benchmark.
    """

    def __init__(
        self,
        plan: Plan,
        benchmarks: Mapping[str, Benchmark],
        pillars: Mapping[str, str | None],
        seed: str,
    ) -> None:
        self._plan = plan
        self._benchmarks = {
            name: bench
            for name, bench in benchmarks.items()
            if plan.covers_benchmark(name, pillars.get(name))
        }
        # A heap, not a sorted list: reading the first few keys of 400,000 (four
        # generated pools) costs their hashing and O(n) for the heap, not a sort.
        self._keys = [
            (hashlib.sha256(f"{seed}\t{name}\t{sample_id}".encode()).digest(), name, sample_id)
            for name in sorted(self._benchmarks)
            for sample_id in self._benchmarks[name].sample_ids()
        ]
        heapq.heapify(self._keys)
        self._found: list[SliceSample] = []
        self._ids: dict[str, frozenset[str]] = {}

    def __iter__(self) -> Iterator[SliceSample]:
        at = 0
        while True:
            while at < len(self._found):
                yield self._found[at]
                at += 1
            if not self._extend():
                return

    def first(self, n: int) -> list[SliceSample]:
        """The slice's first ``n`` samples (fewer when it is smaller)."""
        return list(islice(self, max(0, n)))

    def __contains__(self, key: tuple[str, str]) -> bool:
        """Whether (benchmark name, sample id) is in the slice: a sample of a covered
        benchmark whose labels the plan matches (builds that one sample)."""
        name, sample_id = key
        bench = self._benchmarks.get(name)
        if bench is None:
            return False
        if name not in self._ids:
            self._ids[name] = frozenset(bench.sample_ids())
        if sample_id not in self._ids[name]:
            return False
        (sample,) = bench.samples([sample_id])
        return self._plan.matches(sample.labels.as_dict())

    def _extend(self) -> bool:
        """Build the next chunk of the draw order; False when none was left."""
        chunk = [heapq.heappop(self._keys) for _ in range(min(DRAW_CHUNK, len(self._keys)))]
        built: dict[tuple[str, str], Sample] = {}
        for name in sorted({name for _, name, _ in chunk}):
            ids = [sample_id for _, other, sample_id in chunk if other == name]
            samples = self._benchmarks[name].samples(ids)  # in the order of ids
            built.update(((name, i), s) for i, s in zip(ids, samples, strict=True))
        for _, name, sample_id in chunk:
            sample = built[(name, sample_id)]
            if self._plan.matches(sample.labels.as_dict()):
                self._found.append(SliceSample(self._benchmarks[name], sample))
        return bool(chunk)


def draw_slice(
    plan: Plan,
    benchmarks: Mapping[str, Benchmark],
    pillars: Mapping[str, str | None],
    limit: int,
    seed: str,
) -> list[SliceSample]:
    """At most ``limit`` samples of the plan's slice, drawn by ``seed`` (module doc),
    in draw order."""
    return SliceWalk(plan, benchmarks, pillars, seed).first(limit)
