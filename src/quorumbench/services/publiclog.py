"""The public append-only log of finalized tasks, served for anyone to verify.

A task that reaches its final status (DONE, or DISPUTED after the last round) is
appended in the transaction that finalizes it: the entry (the task, every result
and the consensus, as canonical JSON), its leaf, and a new tree head signed with
the server's Ed25519 key. Appends take the single ``log_state`` row in turn (on
PostgreSQL ``FOR UPDATE``; SQLite has one writer), so leaf indexes are dense and the
log always matches the leaderboard it was written with. Formats and checks live in
``core/publiclog.py``; the hashing in ``core/merkle.py``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Connection, Integer, bindparam, insert, select, update

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.consensus import Verdict
from quorumbench.core.merkle import consistency_proof, inclusion_proof
from quorumbench.core.publiclog import entry_leaf, frontier_append, frontier_root, head_message
from quorumbench.db.models import (
    Benchmark,
    Lease,
    LogEntry,
    LogState,
    Model,
    Result,
    RunnerKey,
    Task,
    TreeHead,
)
from quorumbench.errors import ConfigError, NotFoundError
from quorumbench.services.context import ServerContext

KEY_FILE_NAME = "log-signing-key.pem"
MAX_ENTRIES_PER_PAGE = 1000
_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True)
class LogSigner:
    key: Ed25519PrivateKey
    public_hex: str
    key_id: str

    def sign(self, message: bytes) -> str:
        return self.key.sign(message).hex()


def load_signer(path: Path) -> LogSigner:
    """The key at ``path``; a new one is made there (mode 0600) if there is none."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: read theirs
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(pem)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the log signing key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"the log signing key {path} is not an Ed25519 key")
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return LogSigner(key, public.hex(), sha256_hex(public))


def cached_signer(ctx: ServerContext, attribute: str, path: Path) -> LogSigner:
    """The Ed25519 key kept in ``ctx.<attribute>``, loaded (or made) from ``path`` once."""
    if getattr(ctx, attribute) is None:
        with _LOAD_LOCK:
            if getattr(ctx, attribute) is None:
                setattr(ctx, attribute, load_signer(path))
    signer: LogSigner = getattr(ctx, attribute)
    return signer


def signer_for(ctx: ServerContext) -> LogSigner:
    """The key that signs the log's tree heads."""
    path = ctx.settings.log_key_file or ctx.settings.data_dir / KEY_FILE_NAME
    return cached_signer(ctx, "log_signer", path)


# --- appending --------------------------------------------------------------------

_EMPTY_STATE: dict[str, Any] = {"size": 0, "frontier": []}
_SET_STATE = update(LogState).where(LogState.id == 1)
_TASK = (
    select(
        Task.id,
        Task.epoch_id,
        Task.quorum,
        Task.n_samples,
        Task.sample_ids,
        Task.canary,
        Model.id.label("model_id"),
        Model.ref,
        Benchmark.name,
        Benchmark.version,
        Benchmark.dataset_sha256,
    )
    .join(Model, Model.id == Task.model_id)
    .join(Benchmark, Benchmark.id == Task.benchmark_id)
    .where(Task.id == bindparam("task_id", type_=Integer))
)
_RESULTS = (
    select(
        Result.id,
        Result.runner_id,
        Result.account_id,
        Result.round,
        Result.score,
        Result.sample_scores,
        Result.outputs_sha256,
        Result.payload_sha256,
        Result.counted,
        Result.outlier,
        Result.submitted_at,
        Result.n,
        Result.sample_output_hashes,
        Result.runtime_s,
        Result.hardware,
        Result.model_revision,
        Result.lease_id,
        Lease.attempt,
        Result.key_id,
        RunnerKey.public_key,
        Result.signed_at,
        Result.signature,
    )
    .join(Lease, Lease.id == Result.lease_id)
    .outerjoin(RunnerKey, RunnerKey.key_id == Result.key_id)
    .where(Result.task_id == bindparam("task_id", type_=Integer))
    .order_by(Result.id)
)


def log_entry(
    conn: Connection, task_id: int, round_: int, verdict: Verdict, now: datetime
) -> dict[str, Any]:
    """The log entry of a task that has just reached its final status."""
    task = conn.execute(_TASK, {"task_id": task_id}).one()
    results = conn.execute(_RESULTS, {"task_id": task_id}).all()
    entry = {
        "task": {
            "id": task.id,
            "epoch": task.epoch_id,
            "model": {"id": task.model_id, "ref": task.ref},
            "benchmark": {
                "name": task.name,
                "version": task.version,
                "dataset_sha256": task.dataset_sha256,
            },
            "quorum": task.quorum,
            "n_samples": task.n_samples,
            "sample_ids": task.sample_ids,
        },
        "results": [
            {
                "id": r.id,
                "runner_id": r.runner_id,
                "account_id": r.account_id,
                "round": r.round,
                "score": r.score,
                "sample_scores": r.sample_scores,
                "outputs_sha256": r.outputs_sha256,
                "payload_sha256": r.payload_sha256,
                "counted": r.counted,
                "outlier": r.outlier,
                "submitted_at": r.submitted_at.isoformat(),
                "n": r.n,
                "sample_output_hashes": r.sample_output_hashes,
                "runtime_s": r.runtime_s,
                "hardware": r.hardware,
                "model_revision": r.model_revision,
                "lease_id": r.lease_id,
                "attempt": r.attempt,
                "signature": None
                if r.signature is None
                else {
                    "key_id": r.key_id,
                    "public_key": r.public_key,
                    "signed_at": r.signed_at,
                    "value": r.signature,
                },
            }
            for r in results
        ],
        "consensus": {**verdict.as_dict(), "round": round_, "decided_at": now.isoformat()},
    }
    if task.canary is not None:
        entry["canary"] = public_canary(task.canary)
    return entry


def public_canary(canary: dict[str, Any]) -> dict[str, Any]:
    """What a final task shows of its canary: when it settled, which results were checked."""
    return {
        "settled_at": canary["settled_at"],
        "threshold": canary["threshold"],
        "checks": canary["checks"],
    }


def append(
    ctx: ServerContext, conn: Connection, task_id: int, entry: dict[str, Any], now: datetime
) -> int:
    """Append ``entry`` and sign the new tree head, in the caller's transaction."""
    state = ctx.db.locked_row(conn, LogState, {"id": 1}, _EMPTY_STATE)
    leaf = entry_leaf(entry)
    conn.execute(
        insert(LogEntry),
        {
            "leaf_index": state.size,
            "task_id": task_id,
            "leaf_hash": leaf.hex(),
            "entry": entry,
            "appended_at": now,
        },
    )
    frontier = frontier_append([(s, bytes.fromhex(h)) for s, h in state.frontier], leaf)
    size = state.size + 1
    _sign_head(ctx, conn, size, frontier_root(frontier).hex(), now)
    conn.execute(_SET_STATE, {"size": size, "frontier": [[s, h.hex()] for s, h in frontier]})
    return int(state.size)


def _sign_head(
    ctx: ServerContext, conn: Connection, size: int, root_hex: str, now: datetime
) -> None:
    signer = signer_for(ctx)
    timestamp = now.isoformat()
    conn.execute(
        insert(TreeHead),
        {
            "size": size,
            "root": root_hex,
            "timestamp": timestamp,
            "key_id": signer.key_id,
            "signature": signer.sign(head_message(size, root_hex, timestamp, signer.key_id)),
        },
    )


def ensure_log(ctx: ServerContext) -> None:
    """Load (or make) the signing key; make the state row and sign the empty tree once."""
    signer_for(ctx)
    with ctx.db.write_connection() as conn:
        conn.execute(ctx.db.insert(LogState).values(id=1, **_EMPTY_STATE).on_conflict_do_nothing())
        if conn.execute(select(TreeHead.size).where(TreeHead.size == 0)).first() is None:
            _sign_head(ctx, conn, 0, frontier_root([]).hex(), ctx.now())


# --- reading ----------------------------------------------------------------------


def _head_dict(row: Any) -> dict[str, Any]:
    return {
        "size": row.size,
        "root": row.root,
        "timestamp": row.timestamp,
        "key_id": row.key_id,
        "signature": row.signature,
    }


def latest_head(ctx: ServerContext) -> dict[str, Any]:
    with ctx.db.read_connection() as conn:
        row = conn.execute(select(TreeHead).order_by(TreeHead.size.desc()).limit(1)).first()
    if row is None:
        raise NotFoundError("the log has no tree head yet")
    return _head_dict(row)


def head_at(ctx: ServerContext, size: int) -> dict[str, Any]:
    with ctx.db.read_connection() as conn:
        row = conn.execute(select(TreeHead).where(TreeHead.size == size)).first()
    if row is None:
        raise NotFoundError(f"no tree head of size {size}")
    return _head_dict(row)


def entries(ctx: ServerContext, start: int, limit: int) -> list[dict[str, Any]]:
    limit = min(limit, MAX_ENTRIES_PER_PAGE)
    with ctx.db.read_connection() as conn:
        rows = conn.execute(
            select(LogEntry.leaf_index, LogEntry.leaf_hash, LogEntry.entry)
            .where(LogEntry.leaf_index >= start)
            .order_by(LogEntry.leaf_index)
            .limit(limit)
        ).all()
    return [{"index": r.leaf_index, "leaf_hash": r.leaf_hash, "entry": r.entry} for r in rows]


def _leaves(ctx: ServerContext, size: int) -> list[bytes]:
    """The first ``size`` leaf hashes (a proof needs them all: O(size) for now)."""
    current = latest_head(ctx)["size"]
    if not 0 <= size <= current:
        raise ConfigError(f"tree size {size} is out of range: the log has {current} entries")
    with ctx.db.read_connection() as conn:
        rows = conn.execute(
            select(LogEntry.leaf_hash)
            .where(LogEntry.leaf_index < size)
            .order_by(LogEntry.leaf_index)
        ).scalars()
        return [bytes.fromhex(h) for h in rows]


def inclusion(ctx: ServerContext, index: int, size: int) -> list[str]:
    if not 0 <= index < size:
        raise ConfigError(f"leaf index {index} is out of range for a tree of {size}")
    return [h.hex() for h in inclusion_proof(_leaves(ctx, size), index)]


def consistency(ctx: ServerContext, first: int, second: int) -> list[str]:
    if not 0 < first <= second:
        raise ConfigError(f"need 0 < first <= second, got {first} and {second}")
    return [h.hex() for h in consistency_proof(_leaves(ctx, second), first)]
