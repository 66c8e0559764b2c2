"""Canonical JSON bytes and SHA-256 digests.

Canonical JSON is UTF-8, keys sorted, no insignificant whitespace, no NaN or
infinity. Python prints floats as the shortest string that reads back to the same
double, on every platform, so the bytes are stable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` to canonical JSON bytes."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of ``data`` (a str is encoded as UTF-8 first)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def outputs_digest(entries: Iterable[tuple[str, str]]) -> str:
    """Digest of a run's ordered ``(sample_id, output_sha256)`` pairs.

    It is the SHA-256 of the UTF-8 text made of one line ``<id>\\t<output_sha256>\\n``
    per sample, in run order.
    """
    text = "".join(f"{sample_id}\t{digest}\n" for sample_id, digest in entries)
    return sha256_hex(text)


def predictions_digest(predictions: Iterable[int | str | None]) -> str:
    """Digest of a run's ordered per-sample predictions.

    It is the SHA-256 of the canonical JSON of the list, e.g. ``[0,2,null]`` or
    ``["18","-3",null]`` (``quorumbench.evaluation.predictions`` says what each
    benchmark kind's prediction is).
    """
    return sha256_hex(canonical_json(list(predictions)))
