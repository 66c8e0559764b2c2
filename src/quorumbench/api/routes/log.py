"""The public log: signed tree heads, entries, inclusion and consistency proofs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from quorumbench.api.deps import Context
from quorumbench.api.params import MAX_INT
from quorumbench.errors import NotFoundError
from quorumbench.services import publiclog
from quorumbench.services.context import ServerContext

router = APIRouter(prefix="/v0/log", tags=["log"])


@router.get("/key")
def key(ctx: Context) -> dict[str, str]:
    """The Ed25519 public key that signs new tree heads (raw 32 bytes, hex) and its id."""
    return publiclog.current_key(ctx)


@router.get("/keys")
def keys(ctx: Context) -> dict[str, Any]:
    """The current key and every rotation of the log's key, oldest first: each names the
    tree head after which its new key signs, and is signed by the old and the new key."""
    return {"current": publiclog.current_key(ctx), "rotations": publiclog.key_rotations(ctx)}


@router.get("/head")
def head(ctx: Context, size: int | None = Query(None, ge=0, le=MAX_INT)) -> dict[str, Any]:
    """The newest signed tree head, or the one of ``size``."""
    return publiclog.latest_head(ctx) if size is None else publiclog.head_at(ctx, size)


@router.get("/entries")
def entries(
    ctx: Context,
    start: int = Query(0, ge=0, le=MAX_INT),
    limit: int = Query(publiclog.MAX_ENTRIES_PER_PAGE, ge=1, le=publiclog.MAX_ENTRIES_PER_PAGE),
) -> list[dict[str, Any]]:
    """Entries from ``start`` in log order: ``index``, ``leaf_hash`` and the ``entry``."""
    return publiclog.entries(ctx, start, limit)


@router.get("/proof/inclusion")
def inclusion(
    ctx: Context,
    index: int = Query(..., ge=0, le=MAX_INT),
    size: int = Query(..., ge=1, le=MAX_INT),
) -> dict[str, Any]:
    """The audit path of entry ``index`` in the tree of ``size`` (RFC 6962); 404 when the
    log has no tree of that size, or the tree no such entry."""
    if index >= size:
        raise NotFoundError(f"leaf index {index} is out of range for a tree of {size}")
    _tree(ctx, size)
    return {"index": index, "size": size, "proof": publiclog.inclusion(ctx, index, size)}


@router.get("/proof/consistency")
def consistency(
    ctx: Context,
    first: int = Query(..., ge=1, le=MAX_INT),
    second: int = Query(..., ge=1, le=MAX_INT),
) -> dict[str, Any]:
    """Proof that the tree of ``first`` entries is a prefix of the tree of ``second``; 404
    when the log has no tree of ``second`` entries, or ``first`` is the larger."""
    if first > second:
        raise NotFoundError(f"no proof from a tree of {first} to a smaller one of {second}")
    _tree(ctx, second)
    return {"first": first, "second": second, "proof": publiclog.consistency(ctx, first, second)}


def _tree(ctx: ServerContext, size: int) -> None:
    """NotFoundError unless the log has (had) a tree of ``size`` entries: a proof names
    trees, and the log has no tree larger than itself."""
    current = publiclog.latest_head(ctx)["size"]
    if size > current:
        raise NotFoundError(f"tree size {size} is out of range: the log has {current} entries")
