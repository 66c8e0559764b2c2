"""Edge figures per model and hardware class (public read; services/edge_board.py).

Hardware data measured by the runners of edge tasks: shown beside the ranking, never
used for it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from quorumbench.api.deps import Context
from quorumbench.api.params import MAX_INT
from quorumbench.api.routes.efficiency import CLASS_PATTERN
from quorumbench.services.edge_board import edge_figures

router = APIRouter(prefix="/v0", tags=["efficiency"])


@router.get("/edge")
def get_edge(
    ctx: Context,
    model_id: Annotated[
        int | None, Query(ge=1, le=MAX_INT, description="One model's figures only.")
    ] = None,
    hardware_class: str | None = Query(
        None,
        alias="class",
        max_length=200,
        pattern=CLASS_PATTERN,
        description="One hardware class's figures only (``cpu:amd-epyc-7b13:2c``).",
    ),
) -> dict[str, Any]:
    """The edge benchmark's figures (prefill and decode tokens/s, time to first token,
    peak memory) of each model on each hardware class, from the newest report of each
    runner of the class: per figure the median of the runners' means, the lowest, the
    highest and how many runners had it (docs/efficiency.md, "The edge benchmark").
    Measured on volunteers' hardware; never used for ranking."""
    rows = edge_figures(ctx, model_id=model_id, hardware_class=hardware_class)
    s = ctx.settings
    return {
        "workload": {
            "prompt_tokens": s.edge_prompt_tokens,
            "gen_tokens": s.edge_gen_tokens,
            "every_epochs": s.edge_every_epochs,
            "runners": s.edge_runners,
        },
        "note": "hardware data measured by volunteers' runners; not used for ranking",
        "rows": [row.to_json() for row in rows],
    }
