"""HTTP request and response bodies (separate from the ORM models).

The bodies runners exchange with the server (leases, results, signatures) are the
wire protocol's, in ``quorumbench/protocol.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quorumbench.protocol import Engine
from quorumbench.services.model_metadata import model_size
from quorumbench.services.quota import QuotaStatus
from quorumbench.services.submissions import SubmissionReport

__all__ = ["QuotaStatus", "SubmissionReport"]  # the services' own models, used as they are


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ModelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: str = Field(
        max_length=512,
        pattern=r"^(hf|gguf|openai|bundled):",
        description="Model ref (``hf:owner/name@commit``, ``gguf:``, ``openai:<url>#<model>``); "
        "a branch or tag is pinned to its commit. Whether it can be registered also depends "
        "on what it names (the repo and commit exist, the size limit): 422 if not.",
    )
    name: str | None = Field(
        None, min_length=1, max_length=256, description="Display name (default: detected)."
    )
    family: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Model family (default: detected, config.json's model_type).",
    )


class ModelOut(_Out):
    id: int
    ref: str
    name: str
    owner_id: int
    revision: str
    weights_sha256: str | None
    params: int | None
    architecture: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    license: str | None
    base_ref: str | None
    engine: Engine | None = Field(
        None,
        description="The engine family that evaluates the model's tasks, fixed at "
        "registration (protocol 1.3): llamacpp for a GGUF file, transformers for an hf: "
        "checkpoint or LoRA adapter, endpoint for an openai: ref; null for a backend "
        "plugin's scheme.",
    )
    active: bool
    created_at: datetime
    paused_at: datetime | None = Field(
        None, description="When the model was paused because its tasks kept failing."
    )
    paused_reason: str | None = Field(
        None, description="Why it was paused; its owner resumes it (POST .../resume)."
    )
    retired_at: datetime | None = Field(
        None,
        description="When its owner (or an admin) retired it: off the board and the "
        "schedule; its tasks, results and log entries stay.",
    )
    family: str | None = Field(None, description="Architecture family, detected or submitted.")
    effective_params: int | None = Field(
        None,
        description="The model's size as it runs: for a LoRA adapter its base's parameters "
        "plus its own (null while the base's are unknown); otherwise ``params``.",
    )
    adapter_params: int | None = Field(
        None, description="A LoRA adapter's own parameters (its ``params``); null otherwise."
    )
    base_params: int | None = Field(
        None,
        description="A LoRA adapter's base's parameters, read from the base's weight "
        "headers at registration; null otherwise.",
    )

    @model_validator(mode="before")
    @classmethod
    def _sizes(cls, data: Any) -> Any:
        """The three sizes from the model's ``params`` and ``details`` (model_size)."""
        if isinstance(data, dict):
            fields = dict(data)
        else:
            fields = {name: getattr(data, name) for name in cls.model_fields if hasattr(data, name)}
            fields["details"] = getattr(data, "details", None)
        size = model_size(fields.get("params"), fields.pop("details", None))
        fields.update(
            effective_params=size.effective_params,
            adapter_params=size.adapter_params,
            base_params=size.base_params,
        )
        return fields


class FailureOut(_Out):
    id: int = Field(description="The failure report's id (page on with ``before``).")
    task_id: int
    epoch: int
    benchmark: str
    reason: str = Field(description="What the runner reported (its own words, untrusted).")
    reported_at: datetime | None


class FailuresOut(BaseModel):
    model_id: int
    paused_at: datetime | None
    paused_reason: str | None
    failures: list[FailureOut] = Field(description="Newest first.")
    next_before: int | None = Field(
        description="Pass as ``before`` for older reports; null when there are no more."
    )


class BenchmarkOut(_Out):
    name: str
    version: int
    prompt_version: int
    kind: str
    dataset_sha256: str
    samples_per_task: int
    weight: float = Field(description="Its weight within its pillar (1: equal weights).")
    active: bool
    pillar: str | None = Field(description="Its pillar (null: not run since pillars).")


class EpochOut(BaseModel):
    id: int
    starts_at: datetime
    ends_at: datetime
    seed_commitment: str
    seed: str | None = Field(description="Revealed once the epoch has ended.")


class IntervalOut(BaseModel):
    """A score with its 95% interval (and its descriptive standard error)."""

    score: float
    stderr: float
    ci_low: float
    ci_high: float


class LeaderboardRowOut(BaseModel):
    rank: int | None = Field(
        description="1 + the models of this board with a higher score (ties share a rank); "
        "the same under every sort, filter and page. Null for an aggregate row that is "
        "not ranked (listed with unranked=true; see missing_pillars)."
    )
    rank_best: int | None = Field(
        description="1 + the models whose whole 95% interval lies above this one's."
    )
    rank_worst: int | None = Field(
        description="The board's models minus those whose whole 95% interval lies below."
    )
    model_id: int
    model: str
    benchmark: str
    score: float = Field(
        description="A benchmark's row: the raw score (mean per-item consensus value). "
        "The aggregate: the weighted mean of the chance-corrected pillar scores."
    )
    stderr: float = Field(
        description="The samples' standard error, descriptive only (0 when they all agree)."
    )
    ci_low: float = Field(description="The 95% interval (exact limits, never a point).")
    ci_high: float
    n_samples: int
    n_tasks: int
    updated_at: datetime
    pillar: str | None = Field(None, description="A benchmark's row: its pillar.")
    chance: float | None = Field(
        None,
        description="A benchmark's row: the mean chance level of the items it was scored "
        "on (1/k for k options, 0 for generative items); null while not known.",
    )
    normalised: IntervalOut | None = Field(
        None,
        description="A benchmark's row: the chance-corrected score max(0, (raw - chance) / "
        "(1 - chance)) and its interval (the same map on each end).",
    )
    pillars: dict[str, IntervalOut] | None = Field(
        None,
        description="The aggregate's rows: each pillar's score (mean of its benchmarks' "
        "chance-corrected scores) with its 95% interval, for the pillars that have one.",
    )
    missing_pillars: list[str] = Field(
        default_factory=list,
        description="The aggregate's rows: pillars of positive weight without a score; "
        "a row is ranked only when this is empty.",
    )


class LeaderboardOut(BaseModel):
    total: int
    limit: int
    offset: int
    rows: list[LeaderboardRowOut]


class RunnerKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    public_key: str = Field(
        description="Raw 32-byte Ed25519 public key, hex: a point of the curve's prime-order "
        "group in canonical encoding. Anything else is refused with 400 (checked by the "
        "server, not by the schema's validation: ``format`` names the rule).",
        json_schema_extra={"pattern": "^[0-9a-fA-F]{64}$", "format": "ed25519-public-key"},
    )


class RunnerKeyOut(BaseModel):
    key_id: str
    public_key: str
    runner_id: int
    created_at: datetime
    revoked_at: datetime | None


class MeOut(BaseModel):
    """``GET /v0/me``: the account behind the credential and what the credential may do."""

    account_id: int
    name: str
    is_admin: bool
    scopes: list[str] = Field(
        description="The scopes this credential grants (sorted); admin grants every scope."
    )


class OwnedModelOut(BaseModel):
    """One of the caller's models with where it stands (``GET /v0/me/models``)."""

    model: ModelOut
    status: Literal["pending", "ranked", "disputed", "paused", "retired"] = Field(
        description="``retired``, else ``paused``, else ``ranked`` (a score on an active "
        "benchmark), else ``disputed`` (no score, a task disputed), else ``pending`` (its "
        "first tasks are not settled yet)."
    )
    tasks_done: int
    tasks_disputed: int
    tasks_open: int = Field(description="Tasks not finalized yet.")
    aggregate_complete: bool = Field(
        description="A score on every active benchmark: ranked on the aggregate board."
    )
    url: str = Field(description="Its page.")


TokenScope = Literal["task:pull", "task:submit", "model:register", "benchmark:create", "admin"]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        "api",
        min_length=1,
        max_length=64,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="What the token is for (shown in the list).",
    )
    scopes: list[TokenScope] | None = Field(
        None,
        min_length=1,
        description="Scopes of the new token, each one the request's credential holds "
        "(default: all of them).",
    )
    expires_in_days: int | None = Field(
        None, ge=1, le=3650, description="Days until it expires (default: never)."
    )


class TokenOut(_Out):
    id: int
    name: str
    prefix: str = Field(description="Its first characters, to recognise it (never more).")
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(
        description="Last time it authenticated a request (to the minute), if ever."
    )
    revoked_at: datetime | None

    @model_validator(mode="before")
    @classmethod
    def _scope_list(cls, data: Any) -> Any:
        """The stored space-separated scopes as a list."""
        if isinstance(data, dict):
            fields = dict(data)
        else:
            fields = {name: getattr(data, name) for name in cls.model_fields if hasattr(data, name)}
        if isinstance(fields.get("scopes"), str):
            fields["scopes"] = fields["scopes"].split()
        return fields


class TokenCreatedOut(TokenOut):
    token: str = Field(description="The token itself: shown this once, never again.")


class RunnerKeyRowOut(_Out):
    key_id: str
    public_key: str
    created_at: datetime
    revoked_at: datetime | None


class OwnRunnerOut(_Out):
    id: int
    name: str
    created_at: datetime
    last_seen_at: datetime | None
    results: int
    agreements: int
    outliers: int
    agreement_rate: float | None = Field(
        description="Agreements over agreements and outliers; null before either."
    )
    suspended: bool
    keys: list[RunnerKeyRowOut] = Field(description="Newest first, revoked ones included.")


class GrantOut(BaseModel):
    """Where an account stands with ``benchmark:create`` (creating benchmarks)."""

    model_config = ConfigDict(from_attributes=True)

    held: bool
    agreeing_evaluations: int = Field(
        description="Its accepted evaluations agreeing with consensus (all time)."
    )
    needed: int = Field(
        description="How many bring the permission automatically (0: only an admin grants it)."
    )
    action: Literal["grant", "revoke"] | None = Field(
        description="The latest recorded change (null: none yet)."
    )
    changed_at: datetime | None
    by: str | None = Field(description="The admin who made it (null: automatic, or none).")
    reason: str | None


class GrantIn(BaseModel):
    """``POST /v0/accounts/{account}/grants`` (admin): grant or revoke a permission."""

    model_config = ConfigDict(extra="forbid")

    permission: Literal["benchmark:create"] = "benchmark:create"
    action: Literal["grant", "revoke"]
    reason: str | None = Field(None, max_length=500)


class CreatedBenchmarkOut(BaseModel):
    """A benchmark as ``GET /v0/benchmarks/{name}`` shows it (its active version, else
    its newest)."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    version: int
    prompt_version: int
    kind: str
    pillar: str | None
    dataset_sha256: str
    samples_per_task: int
    active: bool
    created_at: datetime
    origin: Literal["settings", "api"] = Field(
        description="settings: the server's own; api: created by an account."
    )
    owner: str | None
    source_url: str | None = Field(description="Where its data is (created through the API).")
    first_epoch: int | None = Field(description="The first epoch that schedules it.")
    retired_at: datetime | None
    spec: dict[str, Any] | None = Field(
        description="Its custom spec (created through the API; docs/custom-benchmarks.md)."
    )


class AccountOut(BaseModel):
    """``GET /v0/me/account``: the caller's account as its page shows it."""

    account_id: int
    name: str
    is_admin: bool
    created_at: datetime
    scopes: list[str] = Field(description="What this request's credential grants.")
    quota: QuotaStatus
    models: list[OwnedModelOut] = Field(description="Newest first.")
    runners: list[OwnRunnerOut]
    tokens: list[TokenOut] = Field(description="Newest first, revoked ones included.")
    benchmark_create: GrantOut = Field(
        description="Whether the account may create benchmarks, and since when and why."
    )
