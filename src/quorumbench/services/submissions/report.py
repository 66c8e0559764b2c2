"""The submission report: what validating a ref found, in one structured value.

Every door (the API, the site's form, the CLI, a pull request's check) shows this
value as it is, so a refusal reads the same wherever it is met. It is a pydantic model
of the services layer, which the API also uses as its response schema: one class, not
a copy per layer that could drift (``docs/submitting.md`` lists the codes).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quorumbench.errors import QuorumError
from quorumbench.services.quota import QuotaStatus

Level = Literal["error", "warning", "info"]
ModelKind = Literal["checkpoint", "adapter", "gguf", "endpoint"]


class Finding(BaseModel):
    """One thing validation found: an error refuses the registration."""

    model_config = ConfigDict(frozen=True)

    code: str = Field(description="Stable kebab-case code (docs/submitting.md lists them).")
    level: Level = Field(
        description="``error``: registering is refused; ``warning``: allowed, but look; "
        "``info``: what was done or estimated."
    )
    message: str = Field(description="A plain sentence: what was found, and what to do.")
    field: str | None = Field(
        None, description="The part of the submission it is about (``ref``, ``name``…)."
    )


class DetectedMetadata(BaseModel):
    """What was read from the model itself (never from its weights' values)."""

    ref: str = Field(description="The pinned ref that is registered.")
    revision: str | None = Field(description="The commit or content hash it is pinned to.")
    name: str = Field(description="The display name (the submitted one, else detected).")
    family: str | None = Field(
        description="Architecture family: ``model_type`` of config.json, a GGUF file's "
        "architecture (the submitted one, when given)."
    )
    kind: ModelKind
    params: int | None = Field(description="Parameters of the weights read (an adapter's own).")
    effective_params: int | None = Field(
        description="The size it runs with (an adapter with its base; an estimate when "
        "``params_estimated``)."
    )
    params_estimated: bool = Field(
        False,
        description="The size was estimated from pickled files' bytes (no header to read).",
    )
    architecture: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    license: str | None
    base_model: str | None = Field(
        description="An adapter's pinned base; otherwise the base a card or GGUF header names."
    )
    weights_sha256: str | None


class BenchmarkCost(BaseModel):
    name: str
    kind: str = Field(description="``generate`` or ``choice``.")
    samples: int = Field(description="Samples of one first task (the shallow tier).")
    cpu_seconds: float
    gpu_seconds: float


class CostEstimate(BaseModel):
    """An **estimate** of what the model's first epoch of tasks costs (not a measurement)."""

    params: int = Field(description="The size the estimate is computed for.")
    samples: int = Field(description="Samples a runner evaluates: one task per benchmark.")
    cpu_seconds: float = Field(description="Per runner, on the reference CPU.")
    gpu_seconds: float = Field(description="Per runner, on the reference GPU.")
    quorum: int = Field(description="Runners each task needs: the community's cost is that many.")
    benchmarks: list[BenchmarkCost]
    reference_cpu: str
    reference_gpu: str
    method: str = Field(description="How the numbers are computed, in words.")


class ExistingModel(BaseModel):
    """The model registered already under this ref or with these weights."""

    id: int
    ref: str
    name: str
    url: str = Field(description="Its page (``/models/{id}``).")
    yours: bool = Field(description="The caller's account owns it.")
    retired: bool


class SubmissionReport(BaseModel):
    """Every finding for one submitted ref, the metadata read, the account's limits and
    a cost estimate (``POST /v0/submissions/validate``; the ``report`` member of a
    refused ``POST /v0/models``)."""

    ok: bool = Field(description="No error: registering it would succeed now.")
    ref: str = Field(description="The ref as submitted.")
    pinned_ref: str | None = Field(description="The ref pinned to a commit or hash, once read.")
    findings: list[Finding] = Field(description="Errors first, then warnings, then infos.")
    metadata: DetectedMetadata | None = Field(description="Null when the model was not read.")
    quota: QuotaStatus | None = Field(
        description="The account's standing with the limits; null when validated offline "
        "(``quorumbench submission validate`` without ``--server``: no account was asked)."
    )
    estimate: CostEstimate | None = Field(description="Null when the size is unknown.")
    existing: ExistingModel | None = Field(description="A duplicate, or the caller's own repeat.")


_ORDER = {"error": 0, "warning": 1, "info": 2}


class Findings:
    """Findings as the checks add them; an error keeps the exception that refuses it
    (the one ``POST /v0/models`` raises: the first error's, in check order)."""

    def __init__(self) -> None:
        self.items: list[Finding] = []
        self.refusals: list[QuorumError] = []

    def info(self, code: str, message: str, field: str | None = None) -> None:
        self.items.append(Finding(code=code, level="info", message=message, field=field))

    def warning(self, code: str, message: str, field: str | None = None) -> None:
        self.items.append(Finding(code=code, level="warning", message=message, field=field))

    def error(self, code: str, refusal: QuorumError, field: str | None = None) -> None:
        """An error whose sentence is ``refusal``'s message."""
        self.items.append(Finding(code=code, level="error", message=refusal.message, field=field))
        self.refusals.append(refusal)

    def extend(self, other: Findings) -> None:
        self.items.extend(other.items)
        self.refusals.extend(other.refusals)

    @property
    def refusal(self) -> QuorumError | None:
        """The exception that refuses a registration: the first error's."""
        return self.refusals[0] if self.refusals else None

    def ordered(self) -> list[Finding]:
        """Errors, then warnings, then infos; in check order within each level."""
        return sorted(self.items, key=lambda f: _ORDER[f.level])
