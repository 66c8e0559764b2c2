"""Parameter counts and content hashes of weight files, read without loading tensors.

A ``*.safetensors`` file starts with an 8-byte little-endian header length and a
JSON header that maps each tensor name to its dtype, shape and byte offsets, so
the parameter count of a checkpoint is a few kilobytes of reading.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from quorumbench.errors import RegistrationError

_MAX_HEADER = 100 * 1024 * 1024
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")

TORCH_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
"""Safetensors dtype names → torch dtype names (others are lowercased)."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a small config file, or a RegistrationError saying why not."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RegistrationError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RegistrationError(f"{path} does not hold a JSON object")
    return data


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (tensor name → dtype/shape/offsets)."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise RegistrationError(f"{path} is too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > _MAX_HEADER:
                raise RegistrationError(f"{path} has an implausible {length}-byte header")
            raw = handle.read(length)
    except OSError as exc:
        raise RegistrationError(f"cannot read {path}: {exc}") from exc
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise RegistrationError(f"{path} has a malformed safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise RegistrationError(f"{path} has a malformed safetensors header")
    return header


def parameter_counts(paths: Iterable[Path]) -> dict[str, int]:
    """Parameters per safetensors dtype (``{"BF16": 134515008}``) over ``paths``."""
    counts: dict[str, int] = {}
    for path in paths:
        for name, entry in read_header(path).items():
            if name == "__metadata__":
                continue
            try:
                dtype = str(entry["dtype"])
                size = math.prod(int(dim) for dim in entry["shape"])
            except (KeyError, TypeError, ValueError) as exc:
                raise RegistrationError(f"{path}: bad header entry for {name!r}") from exc
            counts[dtype] = counts.get(dtype, 0) + size
    return counts


def majority_dtype(counts: Mapping[str, int]) -> str | None:
    """The torch name of the dtype that holds most parameters, if any."""
    if not counts:
        return None
    dtype = max(sorted(counts), key=lambda key: counts[key])
    return TORCH_DTYPES.get(dtype.upper(), dtype.lower())


def weights_digest(files: Iterable[tuple[str, str]]) -> str:
    """SHA-256 over sorted ``"<name>\\0<file sha256>\\n"`` lines of the weight files."""
    lines = sorted(f"{name}\0{sha}\n" for name, sha in files)
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def weight_files(names: Iterable[str]) -> list[str]:
    """The top-level ``*.safetensors`` names, else the ``*.bin`` ones, sorted."""
    top = sorted(name for name in names if "/" not in name)
    safetensors = [name for name in top if name.endswith(".safetensors")]
    return safetensors or [name for name in top if name.endswith(".bin")]


def front_matter(readme: str) -> dict[str, Any]:
    """The YAML front matter of a model card (``---`` … ``---``), or ``{}``."""
    lines = readme.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        return {}
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def card_hints(card: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(license, base model hint)`` from model-card front matter.

    The hint is ``hf:<owner>/<name>`` without a revision: lineage, not a pinned ref.
    """
    license_ = card.get("license")
    base = card.get("base_model")
    if isinstance(base, list) and len(base) == 1:
        base = base[0]
    hint = f"hf:{base}" if isinstance(base, str) and _REPO_ID.match(base) else None
    return (str(license_) if isinstance(license_, str | int) else None), hint
