"""HTTP bodies of asks and plans (``/v0/asks``, ``/v0/plans``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from quorumbench.core.plans import MAX_ENDPOINTS

PLAN_EXAMPLE: dict[str, Any] = {
    "version": 1,
    "labels": {"subject": ["science/math"], "language": ["ko"]},
    "benchmarks": [],
    "pillars": ["math"],
    "models": {"select": "filter", "max_params": 3_000_000_000},
    "budget": 100,
}


class EndpointIn(BaseModel):
    """A person's own OpenAI-compatible endpoint. The key is used in this server
    process's memory for this ask only: never stored, logged or answered."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        max_length=2000,
        pattern=r"^https?://[^\s/?#@]+[^\s?#]*$",
        description="The API's base URL (``…/v1``): http(s), no credentials, query or "
        "fragment; public addresses only unless the operator allows others.",
        examples=["https://llm.example.org/v1"],
    )
    model: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="The model name the endpoint serves.",
    )
    api_key: SecretStr | None = Field(
        None,
        max_length=4096,
        description="Sent as ``Authorization: Bearer …`` to the endpoint; never stored.",
    )


class AskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(
        None,
        min_length=1,
        max_length=2000,
        pattern=r"\S",
        description="The question in plain words, any language; the planner makes the plan.",
        examples=["best small model for Korean high-school math"],
    )
    plan: dict[str, Any] | None = Field(
        None,
        description="A plan document (version 1, ``docs/asking.md``) used as given; "
        "refused (422 ``invalid-plan``) when not valid.",
        examples=[PLAN_EXAMPLE],
    )
    endpoints: list[EndpointIn] = Field(
        default_factory=list,
        max_length=MAX_ENDPOINTS,
        description="Your own endpoints to evaluate live on the plan's samples (needs a "
        "signed-in account; one evaluation each, not cross-checked, shown to you only).",
    )
    deepen: bool = Field(
        False,
        strict=True,
        description="Also schedule verified tasks for the public models whose slice is "
        "thinner than the plan's budget (needs a signed-in account).",
    )

    @model_validator(mode="after")
    def _query_or_plan(self) -> AskIn:
        if self.query is None and self.plan is None:
            raise ValueError("give a query or a plan")
        return self


class MatchOut(BaseModel):
    text: str
    key: str
    value: str
    confidence: float
    how: str


class ReportOut(BaseModel):
    """How the planner read the query."""

    query: str
    language: str | None
    matches: list[MatchOut]
    unmapped: list[str] = Field(description="Words that mapped to nothing (not guessed).")
    planner: str
    fallback: str | None = Field(
        description="Why the LLM planner was not used although configured (null: it was, "
        "or none is configured)."
    )


class AskOut(BaseModel):
    id: str
    status: Literal["PENDING", "STARTED", "SUCCESS", "FAILURE"]
    plan_id: str = Field(description="The public plan's id (``GET /v0/plans/{plan_id}``).")
    plan: dict[str, Any] = Field(description="The plan, with its endpoints (URL and model).")
    query: str | None
    report: ReportOut | None
    progress_done: int = Field(description="Requests to the endpoints answered so far.")
    progress_total: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    samples_cap: int | None = Field(
        description="Samples each endpoint is evaluated on at most (null: no endpoints)."
    )
    deepen: dict[str, Any] | None


class SliceRowOut(BaseModel):
    """A public model's verified score on the plan's slice."""

    rank: int
    rank_best: int
    rank_worst: int
    model_id: int
    model: str
    ref: str
    score: float
    ci_low: float
    ci_high: float
    n_samples: int
    benchmarks: dict[str, int]
    chance: float | None
    updated_at: datetime = Field(description="When its newest task in the slice was final.")
    thin: bool = Field(description="Fewer samples than the plan's budget.")
    cross_checked: Literal[True] = True


class EndpointRowOut(BaseModel):
    """A person's endpoint: one evaluation, not cross-checked."""

    url: str
    model: str
    status: Literal["PENDING", "STARTED", "SUCCESS", "FAILURE"]
    score: float | None
    ci_low: float | None
    ci_high: float | None
    n_samples: int
    benchmarks: dict[str, int]
    skipped: dict[str, int] = Field(
        description="Samples of the slice not evaluated, per benchmark (code benchmarks "
        "need a sandbox: not run for endpoints)."
    )
    error: str | None
    cross_checked: Literal[False] = False
    note: str


class PlanBoardOut(BaseModel):
    plan_id: str
    plan: dict[str, Any]
    benchmarks: list[str]
    label_sets: int
    rows: list[SliceRowOut]


class AskBoardOut(PlanBoardOut):
    ask: AskOut
    endpoints: list[EndpointRowOut]
