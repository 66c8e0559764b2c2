"""Metadata of a GGUF file from its header alone, read incrementally.

A GGUF file starts with its header: magic ``GGUF``, version, tensor and key/value
counts, the key/value pairs (architecture, name, license, context length, file type,
the tokenizer's vocabulary…) and one info per tensor (name, shape, type, offset).
The tensor data follows. The parameter count is the sum over the tensor shapes, so
everything registration needs is in the header: a few megabytes even for a large
model. :func:`read_gguf_header` parses it from a :class:`~._ranges.ByteSource` (a
local file, or a Hub file over HTTP range requests), fetching more only as the parser
reaches the end of what it holds (:class:`~._ranges.HeaderBuffer`). Versions 2 and 3
are read, in either byte order; the ``gguf`` package is not needed.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorumbench.errors import RegistrationError
from quorumbench.services._ranges import ByteSource, FileSource, HeaderBuffer

MAX_HEADER = 64 * 1024**2
"""The largest GGUF header read (a 256k-token vocabulary takes under 20 MB)."""
_MAX_DIMS = 8
_MAX_DEPTH = 4
_HF_URL = re.compile(
    r"^https?://(?:www\.)?huggingface\.co/([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)/?$"
)
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
"""GGUF scalar value types → struct codes (8 is a string, 9 an array)."""
_STRING, _ARRAY = 8, 9
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE",
}  # fmt: skip
"""llama.cpp's file types (``general.file_type``) by number, as ``gguf.LlamaFileType``
names them without the ``MOSTLY_``/``ALL_`` prefix."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF header says about its model."""

    architecture: str | None
    name: str | None
    license: str | None
    context_length: int | None
    file_type: str | None
    """The llama.cpp file type without its ``MOSTLY_`` prefix, e.g. ``"Q4_1"``."""
    params: int
    base_model: str | None
    """``hf:<owner>/<name>`` from ``general.base_model.0.repo_url`` (unpinned), if any."""
    details: dict[str, Any] = field(default_factory=dict)
    header_bytes: int = 0
    """The header's length (key/values and tensor infos, before the alignment padding)."""


class _Parser:
    """A cursor over a :class:`HeaderBuffer` in the file's byte order."""

    def __init__(self, buffer: HeaderBuffer) -> None:
        self.buffer, self.pos, self.order = buffer, 0, "<"

    def unpack(self, code: str) -> Any:
        size = struct.calcsize(code)
        self.buffer.ensure(self.pos + size)
        (value,) = struct.unpack_from(self.order + code, self.buffer.data, self.pos)
        self.pos += size
        return value

    def skip(self, length: int) -> None:
        self.buffer.ensure(self.pos + length)
        self.pos += length

    def string(self) -> str:
        length = self.unpack("Q")
        start = self.pos
        self.skip(length)
        return bytes(self.buffer.data[start : self.pos]).decode("utf-8", errors="replace")

    def value(self, kind: int, depth: int = 0) -> Any:
        """A value of GGUF type ``kind``; arrays are walked and skipped (``None``)."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY or depth >= _MAX_DEPTH:
            raise ValueError(f"unknown value type {kind} at byte {self.pos}")
        item, count = self.unpack("I"), self.unpack("Q")
        if item in _SCALARS:
            self.skip(count * struct.calcsize(_SCALARS[item]))
        elif item == _STRING:
            for _ in range(count):
                self.skip(self.unpack("Q"))
        else:
            for _ in range(count):
                self.value(item, depth + 1)
        return None


def _header(parser: _Parser) -> tuple[dict[str, Any], int, int]:
    """The scalar and string fields, the parameter count and the tensor count."""
    if parser.buffer.slice(0, 4) != b"GGUF":
        raise RegistrationError(f"{parser.buffer.source.name} is not a GGUF file (no GGUF magic)")
    parser.pos = 4
    version = parser.unpack("I")
    if version & 0xFFFF == 0:  # written big-endian
        parser.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise RegistrationError(
            f"{parser.buffer.source.name} is GGUF version {version}; versions 2 and 3 are read"
        )
    n_tensors, n_fields = parser.unpack("Q"), parser.unpack("Q")
    fields: dict[str, Any] = {}
    for _ in range(n_fields):
        key = parser.string()
        value = parser.value(parser.unpack("I"))
        if value is not None:
            fields[key] = value
    params = 0
    for _ in range(n_tensors):
        parser.skip(parser.unpack("Q"))  # the tensor's name
        n_dims = parser.unpack("I")
        if n_dims > _MAX_DIMS:
            raise ValueError(f"a tensor with {n_dims} dimensions at byte {parser.pos}")
        params += math.prod(parser.unpack("Q") for _ in range(n_dims))
        parser.skip(4 + 8)  # type, offset
    return fields, params, n_tensors


def _text(fields: dict[str, Any], key: str) -> str | None:
    value = fields.get(key)
    return value if isinstance(value, str) and value else None


def _file_type(value: Any) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return FILE_TYPES.get(value, f"unknown-{value}")


def read_gguf_header(source: ByteSource, *, first: int | None = None) -> GGUFInfo:
    """Read the header of the GGUF file ``source`` (see the module docstring).

    ``first`` is the size of the first read (default: ``_ranges.FIRST_READ``).

    Raises:
        RegistrationError: The file is not a GGUF file, is truncated or malformed, or
            its header is larger than :data:`MAX_HEADER`; reading it failed.
    """
    buffer = (
        HeaderBuffer(source, limit=MAX_HEADER)
        if first is None
        else HeaderBuffer(source, limit=MAX_HEADER, first=first)
    )
    parser = _Parser(buffer)
    try:
        fields, params, n_tensors = _header(parser)
    except (ValueError, struct.error, OverflowError) as exc:
        raise RegistrationError(f"{source.name} has a malformed GGUF header: {exc}") from exc
    arch = _text(fields, "general.architecture")
    context = fields.get(f"{arch}.context_length") if arch else None
    details: dict[str, Any] = {"tensor_count": n_tensors}
    if source.size is not None:
        details["size"] = source.size
    for key in ("general.basename", "general.size_label", "general.organization"):
        value = _text(fields, key)
        if value:
            details[key.removeprefix("general.")] = value
    base_name = _text(fields, "general.base_model.0.name")
    if base_name:
        details["base_model_name"] = base_name
    split = fields.get("split.count")
    if isinstance(split, int) and split > 1:
        details["split_count"] = split
    url = _text(fields, "general.base_model.0.repo_url")
    match = _HF_URL.match(url) if url else None
    return GGUFInfo(
        architecture=arch,
        name=_text(fields, "general.name"),
        license=_text(fields, "general.license"),
        context_length=int(context)
        if isinstance(context, int) and not isinstance(context, bool)
        else None,
        file_type=_file_type(fields.get("general.file_type")),
        params=params,
        base_model=f"hf:{match.group(1)}" if match else None,
        details=details,
        header_bytes=parser.pos,
    )


def read_gguf(path: Path) -> GGUFInfo:
    """Read the header of the local GGUF file at ``path`` (:func:`read_gguf_header`)."""
    info = read_gguf_header(FileSource(path))
    info.details["file"] = path.name
    return info
