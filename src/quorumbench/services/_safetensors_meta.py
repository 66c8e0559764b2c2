"""Parameter counts and content hashes of weight files, read without loading tensors.

A ``*.safetensors`` file starts with an 8-byte little-endian header length and a
JSON header that maps each tensor name to its dtype, shape and byte offsets, so
the parameter count of a checkpoint is a few kilobytes of reading: from a local file,
or from a Hub file through HTTP range requests (:mod:`._ranges`).
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
from quorumbench.services._ranges import ByteSource, FileSource, HeaderBuffer

MAX_HEADER = 100 * 1024 * 1024
"""The largest safetensors header read (the format's own limit)."""
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


def parse_json(data: bytes, where: str) -> dict[str, Any]:
    """A JSON object from a small config file's bytes, or a RegistrationError saying why."""
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise RegistrationError(f"cannot read {where}: {exc}") from exc
    if not isinstance(parsed, dict):
        raise RegistrationError(f"{where} does not hold a JSON object")
    return parsed


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a small local config file, or a RegistrationError saying why."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RegistrationError(f"cannot read {path}: {exc}") from exc
    return parse_json(data, str(path))


def read_header(source: ByteSource | Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (tensor name → dtype/shape/offsets).

    Reads the 8-byte length and the header only: one read when the header fits in the
    first :data:`~._ranges.FIRST_READ` bytes, else one more for exactly the rest.
    """
    source = FileSource(source) if isinstance(source, Path) else source
    buffer = HeaderBuffer(source, limit=8 + MAX_HEADER)
    (length,) = struct.unpack("<Q", buffer.slice(0, 8))
    if length > MAX_HEADER:
        raise RegistrationError(f"{source.name} has an implausible {length}-byte header")
    buffer.limit = 8 + length  # the rest, if any, in one read of exactly what is left
    raw = buffer.slice(8, 8 + length)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise RegistrationError(f"{source.name} has a malformed safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise RegistrationError(f"{source.name} has a malformed safetensors header")
    return header


def header_counts(header: Mapping[str, Any], where: str) -> dict[str, int]:
    """Parameters per safetensors dtype in one header."""
    counts: dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(entry["dtype"])
            size = math.prod(int(dim) for dim in entry["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RegistrationError(f"{where}: bad header entry for {name!r}") from exc
        counts[dtype] = counts.get(dtype, 0) + size
    return counts


def parameter_counts(sources: Iterable[ByteSource | Path]) -> dict[str, int]:
    """Parameters per safetensors dtype (``{"BF16": 134515008}``) over the files."""
    counts: dict[str, int] = {}
    for source in sources:
        where = str(source) if isinstance(source, Path) else source.name
        for dtype, n in header_counts(read_header(source), where).items():
            counts[dtype] = counts.get(dtype, 0) + n
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
