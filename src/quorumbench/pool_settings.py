"""The server's settings for prize pools (``QB_POOL_*``).

A mixin of :class:`~quorumbench.settings.ServerSettings` (kept here so that module
stays small); every field reads ``QB_<NAME>`` like the others.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PoolSettings(BaseModel):
    """How prize pools settle (``services/pool_ticks.py``)."""

    pool_finalize_grace_s: int = Field(
        3_600,
        ge=0,
        le=7 * 86_400,
        description="Seconds after a pool's end during which its last epochs' tasks may "
        "still reach consensus: the final standing counts the tasks finalized by the end "
        "plus this grace, whenever the scheduler freezes it (default one epoch).",
    )
    pool_dispute_window_s: int = Field(
        0,
        ge=0,
        le=90 * 86_400,
        description="Seconds between a pool's final standing (end + finalize grace) and "
        "its settlement, for disputes: the standing does not change, but an admin may "
        "still cancel the pool (refunding the funder) then (0: settle at once).",
    )
