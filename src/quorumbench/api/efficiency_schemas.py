"""Bodies of ``GET /v0/efficiency`` (services/efficiency.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class EfficiencyRowOut(BaseModel):
    model_id: int
    model: str
    hardware_class: str
    n_results: int = Field(description="Counted results of finalized tasks with measurements.")
    energy_kwh_per_1k: float | None = Field(
        description="Median over results of energy_kwh / samples × 1000 (kWh per 1,000 "
        "samples); null when no result measured energy (method none)."
    )
    co2_g_per_1k: float | None = Field(description="The same with co2_g (g CO2e).")
    ttft_s: float | None = Field(description="Median time to first token (s).")
    decode_tokens_per_s: float | None = Field(description="Median decode speed.")
    peak_rss_bytes: float | None = Field(description="Median peak resident memory.")
    peak_gpu_bytes: float | None = Field(description="Median peak GPU memory.")
    energy_methods: dict[str, int] = Field(
        description="How many results took their energy by each method (rapl, nvml, "
        "estimate, none)."
    )
    carbon_sources: dict[str, int] = Field(description="Carbon intensity sources seen.")
    aggregate: float | None = Field(description="The model's aggregate score (null: unranked).")
    efficiency: float | None = Field(
        description="aggregate / energy_kwh_per_1k (seed 002); null when either is unknown."
    )


class HardwareClassOut(BaseModel):
    hardware_class: str
    n_results: int
    n_models: int


class EfficiencyOut(BaseModel):
    """One hardware class's figures: measured on volunteers' hardware, shown beside the
    ranking, never used for it."""

    hardware_class: str | None = Field(
        description="The class shown: the one asked for, else the one with the most results."
    )
    sort: str
    classes: list[HardwareClassOut] = Field(description="Every class, most results first.")
    rows: list[EfficiencyRowOut]
