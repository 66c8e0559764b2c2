"""Benchmark data: a local directory or the Hub at a pinned revision, always verified.

A local directory is laid out like ``shared/datasets`` (``gsm8k/test.jsonl``,
``truthfulqa/TruthfulQA.csv``, ...); the exact bytes of each file must hash to the
pinned SHA-256. Without a local directory the same table is read from a Hugging Face
dataset repo at a pinned commit (Parquet); the Hub stores it in another file
format, so there the check is on the SHA-256 of the canonical records (the rows as
the benchmark reads them, as canonical JSON), which the local file yields too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.errors import ChecksumMismatchError, DataError, DataNotFoundError, Hint
from quorumbench.evaluation.benchmark import DataSourceInfo

Records = list[dict[str, Any]]

LOCAL_COPY = Hint("datasets_dir", "give a datasets directory that holds a local copy")
"""The fix for data that cannot be had from the Hub (each surface names its setting)."""


@dataclass(frozen=True)
class HubTable:
    """A table in a Hub dataset repo, pinned to a commit."""

    repo_id: str
    revision: str
    filename: str


@dataclass(frozen=True)
class DataFile:
    """One pinned data file and how to turn it into records."""

    relpath: str
    sha256: str
    records_sha256: str
    parse_local: Callable[[bytes], Records]
    hub: HubTable | None = None
    parse_hub: Callable[[Records], Records] | None = None


@dataclass(frozen=True)
class LoadedData:
    records: Records
    source: DataSourceInfo


def record_at(records: Records, sample_id: str, benchmark: str) -> dict[str, Any]:
    """The record behind a zero-padded row-index sample id."""
    if not sample_id.isdigit() or int(sample_id) >= len(records):
        raise DataError(f"{benchmark} has no sample {sample_id!r}")
    return records[int(sample_id)]


def records_digest(records: Records) -> str:
    """SHA-256 of the canonical JSON of a list of records."""
    return sha256_hex(canonical_json(records))


def read_verified(path: Path, expected_sha256: str) -> bytes:
    """Read a file and check its SHA-256."""
    if not path.is_file():
        raise DataNotFoundError(f"data file not found: {path}")
    data = path.read_bytes()
    actual = sha256_hex(data)
    if actual != expected_sha256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {path}: expected sha256 {expected_sha256}, got {actual}; "
            "the file is not the pinned version of this benchmark's data"
        )
    return data


def load_data(file: DataFile, datasets_dir: Path | None) -> LoadedData:
    """Load and verify ``file`` from ``datasets_dir``, or from the Hub without one."""
    if datasets_dir is not None:
        if not datasets_dir.is_dir():
            raise DataNotFoundError(f"datasets directory not found: {datasets_dir}")
        path = datasets_dir / file.relpath
        records = file.parse_local(read_verified(path, file.sha256))
        return LoadedData(records, DataSourceInfo("local", str(path.resolve())))
    if file.hub is None or file.parse_hub is None:
        raise DataNotFoundError(f"{file.relpath} has no Hub source", hint=LOCAL_COPY)
    return _load_hub(file, file.hub, file.parse_hub)


def _load_hub(file: DataFile, hub: HubTable, parse: Callable[[Records], Records]) -> LoadedData:
    try:
        import pyarrow.parquet as pq
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        from quorumbench.errors import MissingDependencyError

        raise MissingDependencyError(exc.name or "huggingface_hub", "hf") from exc
    try:
        path = hf_hub_download(
            hub.repo_id, hub.filename, revision=hub.revision, repo_type="dataset"
        )
    except Exception as exc:
        raise DataNotFoundError(
            f"cannot download {hub.repo_id}@{hub.revision}/{hub.filename} from the Hub "
            f"({type(exc).__name__})",
            hint=Hint("datasets_dir", f"offline, {LOCAL_COPY.advice}"),
        ) from exc
    try:
        rows: Records = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise DataError(f"cannot read {hub.filename} from {hub.repo_id}: {exc}") from exc
    records = parse(rows)
    actual = records_digest(records)
    if actual != file.records_sha256:
        raise ChecksumMismatchError(
            f"checksum mismatch for {hub.repo_id}@{hub.revision}/{hub.filename}: its records "
            f"hash to {actual}, the pinned {file.relpath} to {file.records_sha256}"
        )
    return LoadedData(records, DataSourceInfo("hub", f"{hub.repo_id}/{hub.filename}", hub.revision))
