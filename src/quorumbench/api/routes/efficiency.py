"""Measured efficiency per model and hardware class (public read; services/efficiency.py).

Shown beside the ranking, never used for it: the leaderboard reads none of it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from quorumbench.api.deps import Context
from quorumbench.api.efficiency_schemas import EfficiencyOut, EfficiencyRowOut, HardwareClassOut
from quorumbench.services.efficiency import (
    CSV_COLUMNS,
    SortField,
    chosen_class,
    csv_text,
    in_class,
    overview,
)

router = APIRouter(prefix="/v0", tags=["efficiency"])
CLASS_PATTERN = r"^[a-z0-9:.+-]*$"
"""A hardware class as core.efficiency.hardware_class writes it."""


@router.get(
    "/efficiency",
    response_model=EfficiencyOut,
    responses={
        200: {
            "description": "One hardware class's figures as JSON, or with ``format=csv`` one "
            f"CSV row per model (columns {', '.join(CSV_COLUMNS)}).",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        }
    },
)
def get_efficiency(
    ctx: Context,
    hardware_class: str | None = Query(
        None,
        alias="class",
        max_length=200,
        pattern=CLASS_PATTERN,
        description="A hardware class (``gpu:nvidia-h100-80gb-hbm3``, "
        "``cpu:amd-epyc-7b13:2c``); omit for the class with the most results.",
    ),
    sort: SortField = "efficiency",
    format: Literal["json", "csv"] = "json",
) -> Any:
    """Energy and CO₂ per 1,000 samples, time to first token, decode speed, peak memory
    and efficiency (aggregate ÷ kWh per 1,000 samples) of each model on one hardware
    class, as medians over the counted results of finalized tasks, with the energy
    methods seen. Measured on volunteers' hardware; shown beside the ranking, never
    used for it. A class without data answers no rows."""
    found = overview(ctx)
    rows = in_class(found, hardware_class, sort)
    if format == "csv":
        return Response(csv_text(rows), media_type="text/csv; charset=utf-8")
    return EfficiencyOut(
        hardware_class=chosen_class(found, hardware_class),
        sort=sort,
        classes=[HardwareClassOut(**asdict(c)) for c in found.classes],
        rows=[EfficiencyRowOut(**asdict(r)) for r in rows],
    )
