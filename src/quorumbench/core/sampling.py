"""Which samples a task uses: a pure function anyone can re-derive.

Every candidate id gets the key ``SHA-256("qb-sample-v1\\0" + dataset_sha256 + "\\0" +
str(benchmark_version) + "\\0" + seed + "\\0" + id)`` (UTF-8, hex digest). Ids are
sorted by (key, id) and the first ``n`` are the sample, in that order. The order of
the candidate list does not matter, and no random number generator is involved, so
the result is the same on every platform and Python version.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable

SAMPLING_SCHEME = "qb-sample-v1"


def sample_key(dataset_sha256: str, benchmark_version: int, seed: str, sample_id: str) -> str:
    """The sort key of one candidate id."""
    material = "\0".join((SAMPLING_SCHEME, dataset_sha256, str(benchmark_version), seed, sample_id))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def sample_ids(
    dataset_sha256: str,
    benchmark_version: int,
    seed: str,
    n: int,
    candidates: Iterable[str],
) -> list[str]:
    """Pick ``n`` ids out of ``candidates`` for (dataset, version, seed).

    Raises ``ValueError`` when ``n`` is not positive, when ids repeat, or when there
    are fewer than ``n`` candidates.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    ids = list(candidates)
    if len(set(ids)) != len(ids):
        raise ValueError("candidate ids must be unique")
    if n > len(ids):
        raise ValueError(f"asked for {n} samples but only {len(ids)} exist")
    # sample_key for every id, hashed from a copy of the shared prefix's state, with the
    # raw digest (ordered as its hex digest is); nsmallest is sorted(...)[:n], cheaper.
    prefix = hashlib.sha256(
        "\0".join((SAMPLING_SCHEME, dataset_sha256, str(benchmark_version), seed, "")).encode()
    )

    def key(sample_id: str) -> tuple[bytes, str]:
        h = prefix.copy()
        h.update(sample_id.encode("utf-8"))
        return h.digest(), sample_id

    return [sample_id for _, sample_id in heapq.nsmallest(n, map(key, ids))]
