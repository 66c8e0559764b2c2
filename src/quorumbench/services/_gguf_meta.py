"""Metadata of a local GGUF file, read with the ``gguf`` package (no tensor data loaded)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorumbench.backends._files import require
from quorumbench.errors import RegistrationError

_HF_URL = re.compile(
    r"^https?://(?:www\.)?huggingface\.co/([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)/?$"
)


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


def _scalar(reader: Any, key: str) -> Any:
    """A scalar or string field's value, or ``None`` when absent or an array."""
    field_ = reader.get_field(key)
    if field_ is None or not field_.types or len(field_.types) != 1:
        return None
    return field_.contents()


def _file_type(value: Any) -> str | None:
    import gguf

    if not isinstance(value, int):
        return None
    try:
        name = str(gguf.LlamaFileType(value).name)
    except ValueError:
        return f"unknown-{value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _base_model(reader: Any) -> str | None:
    url = _scalar(reader, "general.base_model.0.repo_url")
    match = _HF_URL.match(url) if isinstance(url, str) else None
    return f"hf:{match.group(1)}" if match else None


def read_gguf(path: Path) -> GGUFInfo:
    """Read the header of the GGUF file at ``path``.

    Raises:
        MissingDependencyError: The ``gguf`` package is not installed.
        RegistrationError: The file is not a readable GGUF file.
    """
    require("gguf", extra="gguf")
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError, OSError, struct errors…
        raise RegistrationError(f"{path} is not a readable GGUF file: {exc}") from exc
    architecture = _scalar(reader, "general.architecture")
    arch = architecture if isinstance(architecture, str) else None
    context = _scalar(reader, f"{arch}.context_length") if arch else None
    details: dict[str, Any] = {
        "file": path.name,
        "size": path.stat().st_size,
        "tensor_count": len(reader.tensors),
    }
    for key in ("general.basename", "general.size_label", "general.organization"):
        value = _scalar(reader, key)
        if isinstance(value, str):
            details[key.removeprefix("general.")] = value
    base_name = _scalar(reader, "general.base_model.0.name")
    if isinstance(base_name, str):
        details["base_model_name"] = base_name
    name = _scalar(reader, "general.name")
    license_ = _scalar(reader, "general.license")
    return GGUFInfo(
        architecture=arch,
        name=name if isinstance(name, str) and name else None,
        license=license_ if isinstance(license_, str) and license_ else None,
        context_length=int(context) if isinstance(context, int) else None,
        file_type=_file_type(_scalar(reader, "general.file_type")),
        params=sum(int(tensor.n_elements) for tensor in reader.tensors),
        base_model=_base_model(reader),
        details=details,
    )
