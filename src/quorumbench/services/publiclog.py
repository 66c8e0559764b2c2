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

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.consensus import Verdict
from quorumbench.core.merkle import consistency_proof, inclusion_proof
from quorumbench.core.publiclog import (
    ROTATION_FIELDS,
    entry_leaf,
    frontier_append,
    frontier_root,
    head_message,
    rotation_message,
)
from quorumbench.db.engine import describe_url
from quorumbench.db.models import (
    TASK_EPOCH,
    Benchmark,
    Lease,
    LogEntry,
    LogKeyRotation,
    LogState,
    Model,
    Result,
    RunnerKey,
    Task,
    TreeHead,
)
from quorumbench.errors import ConfigError, NotFoundError, ServiceUnavailableError
from quorumbench.services.context import ServerContext
from quorumbench.services.keys import MissingKeyError, SigningKey, key_from_pem, load_key_file
from quorumbench.settings import ServerSettings

KEY_FILE_NAME = "log-signing-key.pem"
KEY_NAME = "log signing key"
"""What errors about the log's key call it."""
MAX_ENTRIES_PER_PAGE = 1000


def load_signer(path: Path, *, create: bool = False) -> SigningKey:
    """The log key in the file ``path``; with ``create``, a new one is made there if
    there is none."""
    return load_key_file(path, KEY_NAME, create=create)


def key_location(settings: ServerSettings) -> str:
    """Where the log key comes from, as the startup lines and errors name it."""
    if settings.log_key is not None:
        return "QB_LOG_KEY (a secret in the environment)"
    return str(log_key_path(settings))


def log_key_path(settings: ServerSettings) -> Path:
    return settings.log_key_file or settings.data_dir / KEY_FILE_NAME


def read_signer(settings: ServerSettings, *, create: bool = False) -> SigningKey:
    """The log key the settings name: ``QB_LOG_KEY`` (PEM), else the key file (made
    there when ``create`` and missing)."""
    if settings.log_key is not None:
        return key_from_pem(settings.log_key.get_secret_value().encode(), KEY_NAME, "in QB_LOG_KEY")
    return load_signer(log_key_path(settings), create=create)


def signer_for(ctx: ServerContext) -> SigningKey:
    """The key that signs the log's tree heads: the server's context holds it from its
    start (:func:`ensure_log`, called by ``services/wiring.py``); admin and reader
    contexts hold none, and nothing they do may sign the log."""
    if ctx.log_signer is None:
        raise ConfigError(
            "this context holds no log signing key: only the server's context "
            "(build_context) loads it; admin and reader contexts never sign the log"
        )
    return ctx.log_signer


# --- appending --------------------------------------------------------------------

_EMPTY_STATE: dict[str, Any] = {"size": 0, "frontier": [], "key_id": None}
_SET_STATE = update(LogState).where(LogState.id == 1)
_TASK = (
    select(
        Task.id,
        Task.epoch_id,
        Task.quorum,
        Task.n_samples,
        Task.sample_ids,
        Task.canary,
        Task.purpose,
        Task.plan_id,
        Task.pool_id,
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
        Result.sample_predictions,
        Result.predictions_sha256,
        Result.runtime_s,
        Result.hardware,
        Result.measurements,
        Result.engine,
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
            # a deepen task's samples are a plan's, a held-out task's its pool's, not
            # the epoch seed's (epoch tasks' entries are as they always were)
            **(
                {}
                if task.purpose == TASK_EPOCH
                else {"purpose": task.purpose, "plan": task.plan_id}
            ),
            **({} if task.pool_id is None else {"pool": task.pool_id}),
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
                # Results submitted before predictions existed have neither (and were
                # signed without them), so their entries leave both out.
                **(
                    {}
                    if r.predictions_sha256 is None
                    else {
                        "sample_predictions": r.sample_predictions,
                        "predictions_sha256": r.predictions_sha256,
                    }
                ),
                "runtime_s": r.runtime_s,
                "hardware": r.hardware,
                # measured around the evaluation (signed with it); absent when not sent,
                # so entries of results without them are as they were
                **({} if r.measurements is None else {"measurements": r.measurements}),
                # the engine that made it (protocol 1.3, signed); absent when not named
                **({} if r.engine is None else {"engine": r.engine}),
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
    ctx: ServerContext, conn: Connection, task_id: int | None, entry: dict[str, Any], now: datetime
) -> int:
    """Append ``entry`` and sign the new tree head, in the caller's transaction; its leaf
    index. ``task_id`` is None for a record that is not a task (a pool's payout)."""
    state = ctx.db.locked_row(conn, LogState, {"id": 1}, _EMPTY_STATE)
    signer = signer_for(ctx)
    if state.key_id is not None and state.key_id != signer.key_id:
        raise ServiceUnavailableError(
            f"the public log is now signed by key {state.key_id} (rotated), but this server "
            f"still has key {signer.key_id}: restart it with the new key "
            f"({key_location(ctx.settings)})"
        )
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
    _sign_head(conn, signer, size, frontier_root(frontier).hex(), now)
    conn.execute(
        _SET_STATE,
        {
            "size": size,
            "frontier": [[s, h.hex()] for s, h in frontier],
            "key_id": signer.key_id,
        },
    )
    return int(state.size)


def _sign_head(
    conn: Connection, signer: SigningKey, size: int, root_hex: str, now: datetime
) -> None:
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


def _expected_key(conn: Connection, state: Any) -> str | None:
    """The key that signs the log's next head: the state's, else the newest head's."""
    if state.key_id is not None:
        return str(state.key_id)
    newest = conn.execute(
        select(TreeHead.key_id).order_by(TreeHead.size.desc()).limit(1)
    ).scalar_one_or_none()
    return None if newest is None else str(newest)


def ensure_log(ctx: ServerContext) -> SigningKey:
    """This server's log key, checked against the log (at the server's start, before
    ``ctx.log_signer`` holds it); on a new log, the key is made and signs the empty
    tree. A key that does not match the log's, or a missing key of a log that has
    heads, refuses the start (ConfigError) instead of signing a second history."""
    settings = ctx.settings
    with ctx.db.write_connection() as conn:
        state = ctx.db.locked_row(conn, LogState, {"id": 1}, _EMPTY_STATE)
        expected = _expected_key(conn, state)
        if expected is None:  # a new log: this server's key becomes the log's key
            signer = read_signer(settings, create=True)
        else:
            try:
                signer = read_signer(settings)
            except MissingKeyError as exc:
                raise ConfigError(
                    f"{exc.message}, but the public log in {describe_url(ctx.db.url)} is "
                    f"signed by key {expected}: copy that key (the log-signing-key.pem of the "
                    "server that made this log, or its backup) to that path, or set "
                    "QB_LOG_KEY_FILE or QB_LOG_KEY; every replica and every restore needs "
                    "the same key (docs/server.md, Running in production)"
                ) from None
            if signer.key_id != expected:
                raise ConfigError(
                    f"the log signing key {key_location(settings)} has id {signer.key_id}, but "
                    f"the public log in {describe_url(ctx.db.url)} is signed by key "
                    f"{expected}: start with that key (every replica and every restore "
                    "needs the same one); to change the key on purpose run `quorumbench log "
                    "rotate-key` (docs/log.md)"
                )
        conn.execute(
            _SET_STATE, {"size": state.size, "frontier": state.frontier, "key_id": signer.key_id}
        )
        if conn.execute(select(TreeHead.size).where(TreeHead.size == 0)).first() is None:
            _sign_head(conn, signer, 0, frontier_root([]).hex(), ctx.now())
    return signer


@dataclass(frozen=True)
class Rotation:
    size: int
    old_key_id: str
    new_key_id: str


def rotate_key(ctx: ServerContext, new: SigningKey) -> Rotation:
    """Hand the log to ``new``: the current key and the new one sign a statement naming
    both and the newest tree head; every head after it is signed by the new key, and
    servers still holding the old key refuse to append (and to start)."""
    old = read_signer(ctx.settings)
    with ctx.db.write_connection() as conn:
        state = ctx.db.locked_row(conn, LogState, {"id": 1}, _EMPTY_STATE)
        expected = _expected_key(conn, state)
        if expected is None:
            raise ConfigError("the log has no tree head yet: start the server once first")
        if old.key_id != expected:
            raise ConfigError(
                f"the log is signed by key {expected}, but the key {key_location(ctx.settings)} "
                f"is {old.key_id}: rotating needs the log's current key"
            )
        if new.key_id == old.key_id:
            raise ConfigError(f"the new key is the current key {old.key_id}: nothing to rotate")
        head = conn.execute(select(TreeHead).where(TreeHead.size == state.size)).one()
        statement = {
            "size": state.size,
            "root": head.root,
            "timestamp": ctx.now().isoformat(),
            "old_key_id": old.key_id,
            "old_public_key": old.public_hex,
            "new_key_id": new.key_id,
            "new_public_key": new.public_hex,
        }
        message = rotation_message(statement)
        try:
            conn.execute(
                insert(LogKeyRotation),
                {
                    **statement,
                    "old_signature": old.sign(message),
                    "new_signature": new.sign(message),
                },
            )
        except IntegrityError as exc:
            raise ConfigError(f"key {new.key_id} signed this log before: use a new key") from exc
        conn.execute(
            _SET_STATE, {"size": state.size, "frontier": state.frontier, "key_id": new.key_id}
        )
    return Rotation(state.size, old.key_id, new.key_id)


def current_key(ctx: ServerContext) -> dict[str, str]:
    """The key that signs the log's next tree head (after the last rotation, if any)."""
    with ctx.db.read_connection() as conn:
        last = conn.execute(
            select(LogKeyRotation.new_public_key).order_by(LogKeyRotation.id.desc()).limit(1)
        ).scalar_one_or_none()
    if last is None:
        signer = signer_for(ctx)
        public, key_id = signer.public_hex, signer.key_id
    else:
        public, key_id = str(last), sha256_hex(bytes.fromhex(last))
    return {"algorithm": "Ed25519", "public_key": public, "key_id": key_id}


_ROTATION_COLUMNS = [
    getattr(LogKeyRotation, name) for name in (*ROTATION_FIELDS, "old_signature", "new_signature")
]


def key_rotations(ctx: ServerContext) -> list[dict[str, Any]]:
    """Every rotation of the log's key, oldest first (docs/log.md)."""
    with ctx.db.read_connection() as conn:
        rows = conn.execute(select(*_ROTATION_COLUMNS).order_by(LogKeyRotation.id)).all()
    return [dict(row._mapping) for row in rows]


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
