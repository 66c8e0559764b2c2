"""HTTP request and response bodies (separate from the ORM models).

The bodies runners exchange with the server (leases, results, signatures) are the
wire protocol's, in ``quorumbench/protocol.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quorumbench.services.model_metadata import model_size


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
    name: str | None = Field(None, max_length=256, description="Display name.")


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
    active: bool
    created_at: datetime
    paused_at: datetime | None = Field(
        None, description="When the model was paused because its tasks kept failing."
    )
    paused_reason: str | None = Field(
        None, description="Why it was paused; its owner resumes it (POST .../resume)."
    )
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
    weight: float
    active: bool


class EpochOut(BaseModel):
    id: int
    starts_at: datetime
    ends_at: datetime
    seed_commitment: str
    seed: str | None = Field(description="Revealed once the epoch has ended.")


class LeaderboardRowOut(BaseModel):
    rank: int = Field(
        description="1 + the models of this board with a higher score (ties share a rank); "
        "the same under every sort, filter and page."
    )
    rank_best: int = Field(
        description="1 + the models whose whole 95% interval lies above this one's."
    )
    rank_worst: int = Field(
        description="The board's models minus those whose whole 95% interval lies below."
    )
    model_id: int
    model: str
    benchmark: str
    score: float
    stderr: float = Field(
        description="The samples' standard error, descriptive only (0 when they all agree)."
    )
    ci_low: float = Field(description="The 95% interval (exact limits, never a point).")
    ci_high: float
    n_samples: int
    n_tasks: int
    updated_at: datetime


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
