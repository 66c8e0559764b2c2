"""``Idempotency-Key`` on requests that move credits (IETF httpapi draft semantics).

A client that retries ``POST /v0/pools`` or ``POST /v0/ledger/mint`` (a timeout, a
proxy's retry) with the same ``Idempotency-Key`` header must not fund a second pool or
mint twice. Keys are per account and action. The first request that succeeds records
(key, SHA-256 of its canonical body, what it made) in ``idempotency_keys`` in the
transaction that made it, so a crash cannot leave one without the other. Then:

* the same key with the same body: nothing is done again; the answer is what the
  first request made, as it is now, marked ``Idempotent-Replayed: true``;
* the same key with another body: ``IdempotencyKeyReusedError`` (422), nothing done;
* the same key at the same moment: the unique constraint lets one transaction commit;
  the other rolls back entirely and answers the winner's result;
* a refused request records nothing, so a corrected one may use the key again.

Keys are kept (no expiry): one row per key an account used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.db.idempotency_models import IdempotencyKey
from quorumbench.errors import IdempotencyKeyReusedError
from quorumbench.services.context import ServerContext

KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
"""What an ``Idempotency-Key`` may be (a UUID fits)."""
REPLAYED_HEADER = "Idempotent-Replayed"
Recorder = Callable[[Session, int], None]
"""Records the key with what was made (its id), in the transaction that made it."""
R = TypeVar("R")


@dataclass(frozen=True)
class Claim:
    account_id: int
    action: str
    key: str
    request_sha256: str


def claim(account_id: int, action: str, key: str | None, body: Any) -> Claim | None:
    """The claim of a request (None without a key): ``body`` as decoded JSON."""
    if key is None:
        return None
    return Claim(account_id, action, key, sha256_hex(canonical_json(body)))


def earlier(ctx: ServerContext, found: Claim | None) -> int | None:
    """What an earlier request with this key made (None: nothing yet); refused when that
    request was another one."""
    if found is None:
        return None
    with ctx.db.read() as session:
        row = session.scalars(
            select(IdempotencyKey).where(
                IdempotencyKey.account_id == found.account_id,
                IdempotencyKey.action == found.action,
                IdempotencyKey.key == found.key,
            )
        ).first()
    if row is None:
        return None
    if row.request_sha256 != found.request_sha256:
        raise IdempotencyKeyReusedError(
            f"Idempotency-Key {found.key!r} was used for another request; use a new key "
            "for a new request (nothing was done)"
        )
    return int(row.result_id)


def recorder(ctx: ServerContext, found: Claim | None) -> Recorder | None:
    """The callback that records the key in the transaction that makes the result."""
    if found is None:
        return None

    def record(session: Session, result_id: int) -> None:
        session.add(
            IdempotencyKey(
                account_id=found.account_id,
                action=found.action,
                key=found.key,
                request_sha256=found.request_sha256,
                result_id=result_id,
                created_at=ctx.now(),
            )
        )
        session.flush()  # a concurrent twin fails here, before anything commits

    return record


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What :func:`once` did: ``made`` by this request, or the id an ``earlier`` one made."""

    made: R | None
    earlier: int | None


def once(
    ctx: ServerContext, found: Claim | None, make: Callable[[Recorder | None], R]
) -> Outcome[R]:
    """Run ``make(record)`` unless an earlier request with this key did (module
    docstring): ``make`` passes ``record`` to the service, which calls it in its
    transaction; a concurrent twin's transaction fails on the key and answers the
    winner's result."""
    previous = earlier(ctx, found)
    if previous is not None:
        return Outcome(None, previous)
    try:
        return Outcome(make(recorder(ctx, found)), None)
    except IntegrityError:
        previous = earlier(ctx, found)  # a concurrent twin committed first
        if previous is None:
            raise
        return Outcome(None, previous)
