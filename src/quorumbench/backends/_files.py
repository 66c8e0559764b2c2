"""Content hashes of local model files and the on-disk cache location."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Literal

from quorumbench.errors import InvalidRefError, MissingDependencyError, ModelLoadError

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """Streaming SHA-256 of one file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def dir_sha256(path: Path) -> str:
    """SHA-256 over every regular file below ``path`` (``.git`` and ``.cache`` skipped).

    The digest covers one line ``<relative posix path>\\0<file sha256>\\n`` per file, in
    sorted path order, so it changes when any file's name or bytes change.
    """
    lines = []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path)
        if rel.parts[0] in (".git", ".cache"):
            continue
        lines.append(f"{rel.as_posix()}\0{file_sha256(file)}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def default_cache_dir() -> Path:
    """Where converted models are kept when no cache directory is configured."""
    return Path.home() / ".cache" / "quorumbench"


def pinned_local(
    location: str, pinned: str | None, kind: Literal["file", "dir"]
) -> tuple[Path, str]:
    """A local model path and its content hash, checked against a pinned hash."""
    path = Path(location).expanduser().resolve()
    if not (path.is_file() if kind == "file" else path.is_dir()):
        what = "model file" if kind == "file" else "model directory"
        raise InvalidRefError(f"{what} not found: {path}")
    digest = file_sha256(path) if kind == "file" else dir_sha256(path)
    if pinned and pinned != digest:
        raise ModelLoadError(f"{path} hashes to {digest}, but the ref pins {pinned}")
    return path, digest


def require(*modules: str, extra: str) -> None:
    """Raise :class:`MissingDependencyError` naming ``extra`` if a module is missing."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(module, extra)
