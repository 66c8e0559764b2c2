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
    pool_reveal_window_s: int = Field(
        7 * 86_400,
        ge=0,
        le=90 * 86_400,
        description="Seconds after a pool's end during which its funder may reveal the "
        "held-out final dataset it committed to; unrevealed by then, the pool ends on its "
        "pool board and its payout record says the split was not used (default 7 days).",
    )
    pool_final_eval_s: int = Field(
        2 * 86_400,
        ge=60,
        le=90 * 86_400,
        description="Seconds the runners have, from the held-out tasks' creation, to "
        "evaluate a revealed held-out split: the final standing is taken when every "
        "held-out task is final, or then on those final by then (default 2 days).",
    )
    pool_final_max_samples: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Held-out items evaluated per entry at most (chosen in the seeded "
        "hash order with the commitment as the seed; all of them when the data has fewer).",
    )
    pool_final_task_samples: int = Field(
        25,
        ge=1,
        le=1_000,
        description="Held-out items per task: each entry gets one task per part of this "
        "many items.",
    )
    pool_budget_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The fraction of each epoch's task and sample budgets reserved for "
        "running prize pools' (entry, benchmark) pairs, split among the pools in "
        "proportion to their funds; what a pool does not use goes back to everyone "
        "(core/pool_priority.py; 0: no reserve).",
    )
