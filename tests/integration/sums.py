"""The ``sums`` custom benchmark (20 exact-match items, no network) as a spec file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_sums_spec(
    directory: Path,
    subject: str = "science/math",
    fields: Callable[[int], dict[str, Any]] = lambda i: {},
) -> str:
    """Write ``sums.jsonl`` and ``sums.json`` into ``directory``; the spec's path.

    Item ``i`` asks ``i + 1`` and carries ``fields(i)`` too, so ``subject`` may be a
    template over them (``"science/{topic}"``)."""
    rows = [{"id": f"s{i}", "q": f"{i} + 1?", "a": str(i + 1), **fields(i)} for i in range(20)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (directory / "sums.jsonl").write_bytes(data)
    spec = {
        "name": "sums",
        "version": 1,
        "format": "exact-match",
        "data": {
            "path": "sums.jsonl",
            "sha256": hashlib.sha256(data).hexdigest(),
            "id_field": "id",
        },
        "prompt": {"version": 1, "template": "Q: {q}\nA:"},
        "answer_field": "a",
        "extract": {"kind": "number"},
        "compare": "number",
        "labels": {"skill": "reasoning", "subject": subject},
    }
    path = directory / "sums.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)
