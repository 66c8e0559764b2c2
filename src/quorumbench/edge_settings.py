"""The server's settings for the edge benchmark (``QB_EDGE_*``).

A mixin of :class:`~quorumbench.settings.ServerSettings` (kept here so that module
stays small); every field reads ``QB_<NAME>`` like the others. The workload and repeat
rule are those of ``quorumbench edge`` (``evaluation/edge.py``); the server hands them
to the runners with each edge task (``services/edge_tasks.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class EdgeServerSettings(BaseModel):
    """How often the server schedules edge tasks, and their workload."""

    edge_every_epochs: int = Field(
        24,
        ge=0,
        le=10_000,
        description="Schedule one edge task per locally run model (not an endpoint) when "
        "it has none from the last this many epochs (default 24: daily with hourly "
        "epochs; 0: never). Edge figures are hardware data: never part of a score.",
    )
    edge_runners: int = Field(
        3,
        ge=1,
        le=50,
        description="How many runners (of distinct accounts) run each edge task; it is "
        "final once that many have sent their figures.",
    )
    edge_prompt_tokens: int = Field(512, ge=1, le=32_768, description="Edge prompt length.")
    edge_gen_tokens: int = Field(128, ge=1, le=8_192, description="Edge tokens generated.")
    edge_warmup: int = Field(1, ge=0, le=100, description="Edge warm-up runs (not counted).")
    edge_min_runs: int = Field(5, ge=1, le=1_000, description="Edge measured runs, at least.")
    edge_min_time_s: float = Field(
        10.0, ge=0, le=3_600, description="Seconds of measured edge runs, at least."
    )
    edge_max_runs: int = Field(50, ge=1, le=1_000, description="Edge measured runs, at most.")

    @model_validator(mode="after")
    def _runs_in_order(self) -> EdgeServerSettings:
        if self.edge_max_runs < self.edge_min_runs:
            raise ValueError(
                f"QB_EDGE_MAX_RUNS ({self.edge_max_runs}) must be at least "
                f"QB_EDGE_MIN_RUNS ({self.edge_min_runs})"
            )
        return self
