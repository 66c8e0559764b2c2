"""Runners' Ed25519 keys: registration, rotation, revocation, and result signatures.

A runner registers the public half of its key (``quorumbench runner init``); a new
key revokes the runner's previous ones. Every submitted result carries a signature
over :func:`quorumbench.core.signing.result_message`, checked by
:func:`check_signature` inside the submission's transaction, before anything is
stored. Verification is libsodium's (PyNaCl): it refuses non-canonical encodings of
``S``, and small-order ``R``; public keys that are small-order points or not
canonical encodings are refused when they are registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nacl.bindings import crypto_core_ed25519_is_valid_point
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from sqlalchemy import Connection, String, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.signing import result_message
from quorumbench.db.models import Runner, RunnerKey
from quorumbench.errors import ConfigError, ConflictError, NotFoundError, SignatureError
from quorumbench.protocol import ResultSignature
from quorumbench.services.accounts import Principal
from quorumbench.services.context import IdentityKey, ServerContext, forget_identities
from quorumbench.services.runners import runner_for

CLOCK_SKEW = timedelta(minutes=5)
"""How far a signature's time may lie outside its lease's lifetime (clock drift)."""


def public_key_bytes(public_hex: str) -> bytes:
    """The 32 bytes of a usable Ed25519 public key, or a ConfigError saying why not."""
    try:
        raw = bytes.fromhex(public_hex)
    except ValueError:
        raise ConfigError("public_key must be hex") from None
    if len(raw) != 32:
        raise ConfigError(f"public_key must be 32 bytes (64 hex digits), not {len(raw)}")
    if not crypto_core_ed25519_is_valid_point(raw):
        raise ConfigError(
            "public_key is not a usable Ed25519 key: a small-order point, or not a "
            "canonical encoding of a point on the curve"
        )
    return raw


def _key_dict(row: Any) -> dict[str, Any]:
    return {
        "key_id": row.key_id,
        "public_key": row.public_key,
        "runner_id": row.runner_id,
        "created_at": row.created_at,
        "revoked_at": row.revoked_at,
    }


def _already_registered(key_id: str, revoked: bool) -> ConflictError:
    return ConflictError(
        f"key {key_id[:16]}… is already registered"
        + (" and revoked" if revoked else "")
        + "; make a new one (quorumbench runner init --rotate)"
    )


def _own_runner(ctx: ServerContext, principal: Principal, runner: str) -> int:
    """The id of this account's runner ``runner``; NotFoundError (never made here)."""
    with ctx.db.read_connection() as conn:
        runner_id = conn.execute(
            select(Runner.id).where(
                Runner.account_id == principal.account_id, Runner.name == runner
            )
        ).scalar()
    if runner_id is None:
        raise NotFoundError(f"this account has no runner {runner!r}")
    return int(runner_id)


def register_key(
    ctx: ServerContext, principal: Principal, runner: str, public_hex: str
) -> dict[str, Any]:
    """Make ``public_hex`` this runner's signing key; its earlier keys are revoked."""
    public = public_key_bytes(public_hex.lower())
    key_id = sha256_hex(public)
    with ctx.db.read_connection() as conn:  # refused before the runner is made
        taken = conn.execute(
            select(RunnerKey.revoked_at, Runner.account_id, Runner.name)
            .join(Runner, Runner.id == RunnerKey.runner_id)
            .where(RunnerKey.key_id == key_id)
        ).first()
    if taken is not None and (
        (taken.account_id, taken.name) != (principal.account_id, runner)
        or taken.revoked_at is not None
    ):
        raise _already_registered(key_id, taken.revoked_at is not None)
    claimant = runner_for(ctx, principal, runner, allow_suspended=True)
    now = ctx.now()
    try:
        with ctx.db.write_connection() as conn:
            known = conn.execute(select(RunnerKey).where(RunnerKey.key_id == key_id)).first()
            if known is not None:
                if known.runner_id != claimant.runner_id or known.revoked_at is not None:
                    raise _already_registered(key_id, known.revoked_at is not None)
                return _key_dict(known)  # registering the same key again changes nothing
            conn.execute(
                update(RunnerKey)
                .where(RunnerKey.runner_id == claimant.runner_id, RunnerKey.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            conn.execute(
                insert(RunnerKey),
                {
                    "runner_id": claimant.runner_id,
                    "key_id": key_id,
                    "public_key": public.hex(),
                    "created_at": now,
                    "revoked_at": None,
                },
            )
            row = conn.execute(select(RunnerKey).where(RunnerKey.key_id == key_id)).one()
        forget_identities(ctx)  # the runner's older keys are revoked now
        return _key_dict(row)
    except IntegrityError as exc:  # the same new key registered twice at once
        raise ConflictError(f"key {key_id[:16]}… was registered concurrently") from exc


def revoke_key(ctx: ServerContext, principal: Principal, runner: str, key_id: str) -> None:
    runner_id = _own_runner(ctx, principal, runner)
    with ctx.db.write_connection() as conn:
        done = conn.execute(
            update(RunnerKey)
            .where(RunnerKey.key_id == key_id, RunnerKey.runner_id == runner_id)
            .where(RunnerKey.revoked_at.is_(None))
            .values(revoked_at=ctx.now())
        )
        if not done.rowcount:
            known = conn.execute(
                select(RunnerKey.revoked_at).where(
                    RunnerKey.key_id == key_id, RunnerKey.runner_id == runner_id
                )
            ).first()
            if known is None:
                raise NotFoundError(f"runner {runner!r} has no key {key_id}")
    forget_identities(ctx)


def runner_keys(ctx: ServerContext, principal: Principal, runner: str) -> list[dict[str, Any]]:
    """The keys of this account's runner ``runner``, revoked ones included."""
    runner_id = _own_runner(ctx, principal, runner)
    with ctx.db.read_connection() as conn:
        rows = conn.execute(
            select(RunnerKey).where(RunnerKey.runner_id == runner_id).order_by(RunnerKey.id)
        ).all()
    return [_key_dict(r) for r in rows]


def public_key(ctx: ServerContext, key_id: str) -> dict[str, Any]:
    with ctx.db.read_connection() as conn:
        row = conn.execute(select(RunnerKey).where(RunnerKey.key_id == key_id)).first()
    if row is None:
        raise NotFoundError(f"no runner key {key_id}")
    return _key_dict(row)


_KEY = select(RunnerKey.runner_id, RunnerKey.public_key, RunnerKey.revoked_at).where(
    RunnerKey.key_id == bindparam("key_id", type_=String)
)


@dataclass(frozen=True)
class RunnerKeyId(IdentityKey[Any]):
    """The identity cache's key for an unrevoked runner key (the value: its ``_KEY`` row)."""

    key_id: str


def _lookup(ctx: ServerContext, conn: Connection, key_id: str) -> Any:
    """A key row; unrevoked keys are remembered like identities (context.py: revoking
    through this process forgets them at once, another replica within its TTL)."""
    cached = ctx.identities.get(RunnerKeyId(key_id))
    if cached is not None:
        return cached
    key = conn.execute(_KEY, {"key_id": key_id}).first()
    if key is not None and key.revoked_at is None:
        ctx.identities.put(RunnerKeyId(key_id), key)
    return key


def check_signature(
    ctx: ServerContext,
    conn: Connection,
    lease: Any,
    digest: str,
    signature: ResultSignature,
    now: datetime,
) -> str:
    """Refuse (SignatureError) unless ``signature`` is the lease runner's, on this result.

    ``lease`` is the submission's lease row (with its task's model ref and benchmark).
    Returns the runner's public key (hex).
    """
    key = _lookup(ctx, conn, signature.key_id)
    if key is None or key.runner_id != lease.runner_id:
        raise SignatureError(
            f"key {signature.key_id[:16]}… is not a key of the runner that holds lease {lease.id}"
        )
    if key.revoked_at is not None:
        raise SignatureError(f"key {signature.key_id[:16]}… was revoked; sign with the new key")
    try:
        signed_at = datetime.fromisoformat(signature.signed_at)
    except ValueError:
        raise SignatureError(f"signed_at {signature.signed_at!r} is not an ISO 8601 time") from None
    if signed_at.tzinfo is None:
        raise SignatureError("signed_at needs a UTC offset")
    if not lease.leased_at - CLOCK_SKEW <= signed_at <= now + CLOCK_SKEW:
        raise SignatureError(
            f"signed at {signature.signed_at}, outside lease {lease.id} "
            f"(leased {lease.leased_at.isoformat()}): a replayed or stale signature"
        )
    message = result_message(
        task_id=lease.task_id,
        lease_id=lease.id,
        attempt=lease.attempt,
        model_ref=lease.model_ref,
        benchmark=lease.benchmark_name,
        benchmark_version=lease.benchmark_version,
        dataset_sha256=lease.dataset_sha256,
        result_sha256=digest,
        signed_at=signature.signed_at,
    )
    try:
        VerifyKey(bytes.fromhex(key.public_key)).verify(message, bytes.fromhex(signature.value))
    except BadSignatureError:
        raise SignatureError(
            "the signature does not verify for this result, task, lease, model and benchmark"
        ) from None
    return str(key.public_key)
