"""Epochs as the API shows them: the seed's commitment, and the seed once it is over."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from quorumbench.db.models import Epoch
from quorumbench.errors import NotFoundError
from quorumbench.services.context import ServerContext
from quorumbench.services.scheduler import ensure_epoch, revealed_seed


@dataclass(frozen=True)
class PublicEpoch:
    id: int
    starts_at: datetime
    ends_at: datetime
    seed_commitment: str
    seed: str | None
    """Revealed once the epoch has ended (:func:`~quorumbench.services.scheduler.revealed_seed`)."""


def _public(ctx: ServerContext, epoch: Epoch) -> PublicEpoch:
    return PublicEpoch(
        epoch.id,
        epoch.starts_at,
        epoch.ends_at,
        epoch.seed_commitment,
        revealed_seed(epoch, ctx.now()),
    )


def current_epoch(ctx: ServerContext) -> PublicEpoch:
    """The epoch running now (made, with a new secret seed, if it does not exist yet)."""
    return _public(ctx, ensure_epoch(ctx, ctx.now()))


def get_epoch(ctx: ServerContext, epoch_id: int) -> PublicEpoch:
    with ctx.db.read() as session:
        epoch = session.get(Epoch, epoch_id)
    if epoch is None:
        raise NotFoundError(f"no epoch {epoch_id}")
    return _public(ctx, epoch)
