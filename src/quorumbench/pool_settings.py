"""The server's settings for prize pools (``QB_POOL_*``).

A mixin of :class:`~quorumbench.settings.ServerSettings` (kept here so that module
stays small); every field reads ``QB_<NAME>`` like the others.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PoolSettings(BaseModel):
    """How prize pools settle (``services/pool_ticks.py``)."""

    pool_dispute_window_s: int = Field(
        0,
        ge=0,
        le=90 * 86_400,
        description="Seconds between a pool's end (its final standing frozen) and its "
        "settlement, for disputes: an admin may still cancel it then (0: settle at the "
        "first scheduler tick after the end).",
    )
