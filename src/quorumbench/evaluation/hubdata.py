"""Hub-only benchmark data: one Parquet file of a Hugging Face dataset repo, pinned.

These benchmarks ship no local copy whose canonical records we could hash ahead of
time (``evaluation/data.py``). Their pin is the file itself:

* ``repo_id`` and ``revision``, a 40-hex commit: a commit never changes, so neither
  does the file at ``filename`` in it;
* the file's SHA-256. Downloaded from the Hub, the bytes must hash to the SHA-256
  the Hub's LFS metadata gives for that file at that commit, and to ``sha256`` too
  where one was found in public sources and written into the code.

The benchmark's ``dataset_sha256`` is that verified file SHA-256, so sample
selection, a pure function of it, agrees on every machine that has the same bytes.

Offline, a datasets directory may hold the same Parquet bytes at
``<datasets_dir>/<local_relpath>`` (the repo's name without its owner, then the
file's path in the repo: ``ai2_arc/ARC-Challenge/test-00000-of-00001.parquet``).
A file found there is checked against ``sha256`` when one is pinned; without one it
is identified by its own SHA-256, which a task names, so a runner whose copy differs
is refused by the task's data check rather than scoring other questions.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from quorumbench.errors import (
    ChecksumMismatchError,
    DataError,
    DataNotFoundError,
    Hint,
    MissingDependencyError,
)
from quorumbench.evaluation.benchmark import DataSourceInfo

Rows = list[dict[str, Any]]

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class HubFile:
    """One Parquet file of a Hub dataset repo at a pinned commit.

    ``revision`` None: no commit could be pinned from public sources yet, so the Hub
    route is refused and only a local copy is read. ``sha256`` None: the file's
    SHA-256 is taken from the Hub's LFS metadata at ``revision``.
    """

    repo_id: str
    revision: str | None
    filename: str | None
    """The file's path in the repo at ``revision`` (None only while nothing is pinned)."""
    sha256: str | None = None
    rows: int | None = None
    """The row count the pinned file has, where known (a check on the parse)."""
    local_name: str | None = None
    """Where a datasets directory holds the file, when not ``<repo name>/<filename>``."""

    def __post_init__(self) -> None:
        if self.revision is not None and not _COMMIT.match(self.revision):
            raise ValueError(f"{self.repo_id}: revision must be a 40-hex commit")
        if self.revision is not None and self.filename is None:
            raise ValueError(f"{self.repo_id}: a pinned revision needs a filename")
        if self.filename is None and self.local_name is None:
            raise ValueError(f"{self.repo_id}: a file needs a filename or a local name")
        if self.sha256 is not None and not _SHA256.match(self.sha256):
            raise ValueError(f"{self.repo_id}/{self.filename}: sha256 must be 64 hex digits")

    @property
    def local_relpath(self) -> str:
        """Where a datasets directory holds this file: ``<repo name>/<filename>``."""
        if self.local_name is not None:
            return self.local_name
        return f"{self.repo_id.split('/')[-1]}/{self.filename}"

    @property
    def address(self) -> str:
        if self.revision is None or self.filename is None:
            return f"{self.repo_id} (no revision pinned; local copy {self.local_relpath})"
        return f"{self.repo_id}@{self.revision}/{self.filename}"


@dataclass(frozen=True)
class LoadedHubFile:
    """A verified file's rows, its SHA-256 and where it came from."""

    rows: Rows
    sha256: str
    source: DataSourceInfo


class _Download(NamedTuple):
    data: bytes
    lfs_sha256: str
    """The SHA-256 the Hub's LFS metadata gives for the file at the pinned commit."""


def _offline_hint(file: HubFile) -> Hint:
    return Hint("datasets_dir", f"give a datasets directory that holds {file.local_relpath}")


def load_hub_file(file: HubFile, datasets_dir: Path | None) -> LoadedHubFile:
    """The rows of ``file``: from ``datasets_dir`` when it holds the file, else the Hub."""
    if datasets_dir is not None:
        if not datasets_dir.is_dir():
            raise DataNotFoundError(f"datasets directory not found: {datasets_dir}")
        path = datasets_dir / file.local_relpath
        if path.is_file():
            data = path.read_bytes()
            digest = _check_pinned(
                file, data, str(path), "replace it with that file, or remove it to download it"
            )
            return LoadedHubFile(
                _read_parquet(file, data),
                digest,
                DataSourceInfo("local", str(path.resolve()), file.revision),
            )
    if file.revision is None or file.filename is None:
        raise DataNotFoundError(
            f"no Hub revision of {file.repo_id} is pinned, so nothing is downloaded",
            hint=_offline_hint(file),
        )
    data, expected = _download(file, file.revision, file.filename)
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise ChecksumMismatchError(
            f"checksum mismatch for {file.address}: the Hub's LFS metadata gives sha256 "
            f"{expected}, the downloaded bytes hash to {digest}; delete the cached copy "
            "and try again, or give a datasets directory that holds a good copy"
        )
    _check_pinned(file, data, file.address, "give a datasets directory that holds the pinned file")
    source = DataSourceInfo("hub", f"{file.repo_id}/{file.filename}", file.revision)
    return LoadedHubFile(_read_parquet(file, data), digest, source)


def _check_pinned(file: HubFile, data: bytes, where: str, fix: str) -> str:
    """The SHA-256 of ``data``; ChecksumMismatchError if a pinned SHA-256 differs."""
    digest = hashlib.sha256(data).hexdigest()
    if file.sha256 is not None and digest != file.sha256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {where}: expected sha256 {file.sha256}, got {digest}; "
            f"the file is not {file.address}: {fix}"
        )
    return digest


def _download(file: HubFile, revision: str, filename: str) -> _Download:
    """The file's bytes and the SHA-256 the Hub's LFS metadata gives at ``revision``."""
    try:
        import huggingface_hub
    except ImportError as exc:
        raise MissingDependencyError("huggingface_hub", "hf") from exc
    try:
        infos = huggingface_hub.HfApi().get_paths_info(
            file.repo_id, [filename], revision=revision, repo_type="dataset"
        )
        path = huggingface_hub.hf_hub_download(
            file.repo_id, filename, revision=revision, repo_type="dataset"
        )
        data = Path(path).read_bytes()
    except Exception as exc:
        raise DataNotFoundError(
            f"cannot download {file.address} from the Hub ({type(exc).__name__})",
            hint=_offline_hint(file),
        ) from exc
    lfs = [getattr(i, "lfs", None) for i in infos if getattr(i, "path", None) == filename]
    sha = getattr(lfs[0], "sha256", None) if lfs else None
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise DataError(
            f"the Hub gives no LFS SHA-256 for {file.address}, so the download cannot be "
            "verified; give a datasets directory that holds a good copy"
        )
    return _Download(data, sha)


def _read_parquet(file: HubFile, data: bytes) -> Rows:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError("pyarrow", "hf") from exc
    try:
        rows: Rows = pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DataError(
            f"cannot read {file.address} as Parquet ({reason}); "
            "give a datasets directory that holds the pinned file"
        ) from exc
    if file.rows is not None and len(rows) != file.rows:
        raise DataError(
            f"{file.address} has {len(rows)} rows, the pinned file {file.rows}; "
            "give a datasets directory that holds the pinned file"
        )
    return rows


def require_columns(file: HubFile, rows: Rows, columns: Sequence[str]) -> None:
    """DataError unless every row has every one of ``columns``."""
    for index, row in enumerate(rows):
        missing = [c for c in columns if c not in row]
        if missing:
            raise DataError(
                f"{file.address} row {index} lacks the columns {', '.join(missing)}; "
                "it is not the pinned file (give a datasets directory that holds it)"
            )
