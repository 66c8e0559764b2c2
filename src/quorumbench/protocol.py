"""The runner ↔ server wire protocol: every body a runner and the server exchange.

Runners are other people's machines that upgrade on their own schedule, so this is
the one contract that crosses both a trust and a deployment boundary. Both sides
import these types: the queue builds a :class:`Task`, the API serves a
:class:`LeaseGrant` and parses a :class:`Submission`, the runner parses the grant and
builds the :class:`ResultPayload` it signs. The OpenAPI document at ``/docs`` is
generated from them.

Versions (:data:`PROTOCOL_VERSION`, ``MAJOR.MINOR``):

* A **minor** version adds optional fields. An optional field added after 1.0 is
  declared with :func:`added_field`: absent (null) it is left out of the body and of
  the signed bytes, so a result without it hashes exactly as it did before the field
  existed, and an older runner's signature still verifies.
* A **major** version is an incompatible change. The server accepts the majors in
  :data:`ACCEPTED_MAJORS`, up to its own minor; a runner outside that range is refused
  at once (:class:`~quorumbench.errors.UnsupportedProtocolError`, HTTP 426) with the
  versions accepted and how to upgrade, and stops instead of retrying.

What the server sends (the grant, the task, the receipt) ignores fields it does not
know, so an older runner can read a newer server's answers within a major version;
what a runner sends is parsed strictly (unknown fields are refused).

The signed bytes of a result are the canonical JSON (``core/canonical.py``) of
``ResultPayload.model_dump(mode="json")`` — the same call on both sides
(``core/signing.py``). This module is pure pydantic: no I/O, no other layer.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    model_serializer,
)

from quorumbench.errors import UnsupportedProtocolError

PROTOCOL_VERSION: Final = "1.4"
"""The protocol this code speaks. Runners from before the protocol was versioned send
no version and speak 1.0 (their bodies are exactly 1.0's). 1.1 added a result's
``measurements`` (issue 18); 1.2 added edge tasks (:data:`EDGE_SINCE`); 1.3 added
engines (:data:`ENGINE_SINCE`); 1.4 LoRA adapters on GGUF files on llama.cpp
(:data:`GGUF_ADAPTER_SINCE`)."""
EDGE_SINCE: Final = "1.2"
"""The first version that runs edge tasks (a task whose benchmark has ``kind`` "edge",
answered with an :class:`EdgeSubmission`). The server leases them only to runners that
say they speak it: an older runner would not know what to do with one."""
ENGINE_SINCE: Final = "1.3"
"""The first version in which a task names the engine that evaluates it
(``TaskModel.engine``), a runner lists the engines it has (``LeaseRequest.engines``) and
a result names the engine that made it (``ResultPayload.engine``)."""
GGUF_ADAPTER_SINCE: Final = "1.4"
"""The first version whose llama.cpp engine runs an ``hf:`` LoRA adapter on a GGUF base
(its ``adapter_config.json`` names a ``gguf:`` or ``bundled:`` base): such a model's
tasks name the ``llamacpp`` engine, and the server offers them only to runners that
speak this version (a 1.3 runner's llama.cpp engine runs GGUF files alone)."""
Engine = Literal["transformers", "llamacpp", "endpoint"]
"""An engine family: results of one task all come from one, as their numbers differ
across engines (quantized kernels, de-quantized float32, a remote server)."""
ENGINES: Final[tuple[Engine, ...]] = ("transformers", "llamacpp", "endpoint")
LEGACY_ENGINES: Final[tuple[Engine, ...]] = ("transformers", "endpoint")
"""What a runner that lists no engines has (every runner before 1.3): it evaluates
``hf:`` refs and GGUF files de-quantized on transformers and ``openai:`` refs at the
endpoint."""
UNVERSIONED: Final = "1.0"
"""What a body without ``protocol_version`` speaks (runners from before versions)."""
ACCEPTED_MAJORS: Final = frozenset({1})
"""The major versions this server accepts (each up to this code's own minor)."""
UPGRADE_COMMAND: Final = "pip install -U quorumbench"

Version = Annotated[
    str,
    Field(
        pattern=r"^[0-9]{1,4}\.[0-9]{1,4}$",
        description="A protocol version, MAJOR.MINOR.",
        examples=[PROTOCOL_VERSION],
    ),
]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256, lowercase hex.")]
BENCHMARK_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$"
"""A benchmark's registered name: lowercase kebab-case, 3-64 characters."""
RUNNER_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
RunnerName = Annotated[
    str,
    Field(
        pattern=RUNNER_NAME_PATTERN,
        description="A runner's name within its account: 1-64 letters, digits, '_', '.', '-'.",
    ),
]
PullKey = Annotated[str, Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
MAX_ID: Final = 2**31 - 1
"""The largest id or counter a body may carry (PostgreSQL's ``integer``)."""
Attempt = Annotated[int, Field(ge=0, le=MAX_ID, description="The lease's fencing token.")]
PromptOption = StrictInt | float | StrictStr | bool
"""A benchmark prompt option's value (shots, token limit, primer…)."""
Prediction = StrictInt | StrictStr | None
"""A sample's canonical prediction (``evaluation/predictions.py``)."""


def _is_none(value: object) -> bool:
    return value is None


def added_field(description: str, **constraints: Any) -> Any:
    """An optional field added after protocol 1.0: left out of the body and the signed
    bytes when it is absent (null), so results without it hash as they did before."""
    return Field(default=None, exclude_if=_is_none, description=description, **constraints)


class TaskStatus(StrEnum):
    """Where a task stands (the same values in the database, the API and the log)."""

    PENDING = "PENDING"
    """Open: waiting for more results, or for runners after a dispute."""
    DONE = "DONE"
    """Finalized: enough runners agreed; the task has a score."""
    DISPUTED = "DISPUTED"
    """Runners disagreed: requeued to fresh runners, or final after the last round."""


class _FromServer(BaseModel):
    """A body the server sends: an older runner ignores fields it does not know."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _FromRunner(BaseModel):
    """A body a runner sends: parsed strictly, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _SetFieldsOnly(_FromRunner):
    """Dumped with the fields that were given only (absent ones stay absent, a given
    null stays null), so the signed bytes are what the runner recorded."""

    @model_serializer(mode="wrap")
    def _given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items() if k in self.model_fields_set}


# -- the task a lease grants (server → runner) --------------------------------------


class TaskModel(_FromServer):
    """The model to evaluate, at its pinned revision."""

    id: int
    ref: str = Field(description="The model ref, pinned (see docs/models.md).")
    revision: str | None = Field(
        None, description="The pinned revision (commit or weights SHA-256) the ref names."
    )
    engine: Engine | None = added_field(
        "The engine family that evaluates this model (protocol 1.3, docs/protocol.md "
        '"Engines"): ``llamacpp`` runs a GGUF file as it is, ``transformers`` runs '
        "``hf:`` refs, LoRA adapters and (for a model registered before 1.3) GGUF files "
        "de-quantized, ``endpoint`` is the ``openai:`` endpoint itself. A runner without "
        "it gives the task back. Absent: the runner's own choice for the ref, which is "
        "what every runner before 1.3 did."
    )


class TaskBenchmark(_FromServer):
    """The benchmark version a task was scheduled with; a runner must have the same."""

    name: str
    version: int
    prompt_version: int
    dataset_sha256: str = Field(description="SHA-256 of the benchmark's exact data bytes.")
    config: dict[str, PromptOption] = Field(
        description="The benchmark's prompt options by name (each benchmark names its own: "
        "shots, max_new_tokens, primer…); a runner whose options differ refuses the task.",
    )
    kind: Literal["edge"] | None = added_field(
        '``edge`` for an edge task (protocol 1.2, docs/efficiency.md "The edge '
        'benchmark"): run the edge workload that ``config`` gives, score nothing, and '
        "send an EdgeSubmission. Absent for a scored benchmark."
    )
    spec_json: str | None = added_field(
        "A benchmark created through the API: its custom spec (docs/custom-benchmarks.md) "
        "as JSON text, which the runner validates with the same parser as the server, "
        "then fetches the data by its data.url and checks it against its SHA-256; absent "
        "for a benchmark the runner has by name. (Text, not an object: the spec's schema "
        "is the custom-spec format's, versioned with it, not the wire protocol's.)"
    )


class Task(_FromServer):
    """What to evaluate: a model, a benchmark version, and exactly these samples."""

    id: int
    epoch: int
    round: int = Field(description="1, or more after a dispute.")
    model: TaskModel
    benchmark: TaskBenchmark
    n_samples: int
    seed_commitment: str = Field(
        description="SHA-256 of the epoch's seed, which stays secret until the epoch ends."
    )
    sample_ids: list[str] = Field(description="The samples, in the order to evaluate them.")


class LeaseGrant(_FromServer):
    """``POST /v0/leases``: a leased task slot and the fencing token to act under."""

    protocol_version: Version = Field(PROTOCOL_VERSION, description="The server's protocol.")
    lease_id: int
    attempt: int = Field(description="The fencing token: send it back with every call.")
    expires_at: datetime = Field(description="The deadline; heartbeats extend it.")
    task: Task


class LeaseRequest(_FromRunner):
    """``POST /v0/leases``: pull a task."""

    protocol_version: Version = Field(
        UNVERSIONED, description="The runner's protocol (absent: 1.0)."
    )
    runner: RunnerName = "default"
    pull_key: PullKey | None = Field(
        None,
        description="Idempotency key: a retried pull with the same key returns the same lease.",
    )
    engines: list[Engine] | None = added_field(
        "The engines this runner can evaluate with (protocol 1.3): it is offered only "
        "tasks whose model names one of them (or none). Absent: transformers and "
        "endpoint, what a runner before 1.3 has.",
        max_length=len(ENGINES),
    )


class Heartbeat(_FromRunner):
    """``POST /v0/leases/{id}/heartbeat``."""

    attempt: Attempt


class HeartbeatAck(_FromServer):
    lease_id: int
    expires_at: datetime


class FailureReport(_FromRunner):
    """``POST /v0/leases/{id}/failure``: this runner could not evaluate the task."""

    attempt: Attempt
    reason: str = Field(
        min_length=1, max_length=500, description="Why the task could not be evaluated."
    )


# -- the result (runner → server, signed) -------------------------------------------


class Machine(_SetFieldsOnly):
    """The runner's machine (``evaluation/environment.py``). Fields added later are
    left out when not given, so older results hash as they did."""

    os: str | None = None
    machine: str | None = None
    processor: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    cpu_model: str | None = Field(None, description="The CPU's model name (/proc/cpuinfo).")
    gpu_name: str | None = Field(None, description="The GPU the model ran on, if any.")
    gpu_count: int | None = Field(None, ge=0)
    gpu_memory_bytes: int | None = Field(None, ge=0, description="That GPU's total memory.")
    gpu_driver: str | None = None
    cuda_version: str | None = None


EnergyMethod = Literal["rapl", "nvml", "estimate", "none"]
"""How a result's energy was measured (docs/efficiency.md): Linux powercap counters,
NVIDIA's NVML, an estimate (CPU TDP × utilisation), or not at all."""


class Measurements(_SetFieldsOnly):
    """What the runner measured around one evaluation (docs/efficiency.md). Every number
    comes with how it was taken; a reading that was not available is absent (or
    ``energy_method: "none"``), never invented. Hardware data: never part of a score's
    consensus or the ranking."""

    wall_s: float | None = Field(None, ge=0, description="Wall time of the evaluation.")
    energy_kwh: float | None = Field(None, ge=0)
    energy_method: EnergyMethod | None = None
    energy_scope: str | None = Field(
        None, max_length=200, description="What the energy covers (e.g. package-0, gpu:0)."
    )
    carbon_intensity_g_per_kwh: float | None = Field(None, ge=0)
    carbon_intensity_source: str | None = Field(
        None,
        max_length=100,
        description="Where the intensity came from (a country, a setting, the world average).",
    )
    co2_g: float | None = Field(None, ge=0, description="energy_kwh × the intensity.")
    prompt_tokens: int | None = Field(None, ge=0)
    generated_tokens: int | None = Field(None, ge=0)
    ttft_s: float | None = Field(
        None, ge=0, description="Median time to first token over the generation batches."
    )
    decode_tokens_per_s: float | None = Field(
        None, ge=0, description="Tokens generated after the first, per second of decoding."
    )
    peak_rss_bytes: int | None = Field(
        None, ge=0, description="The evaluating process's resident-memory high-water mark."
    )
    peak_gpu_bytes: int | None = Field(None, ge=0, description="Peak GPU memory allocated.")


class Libraries(_SetFieldsOnly):
    """Versions of the libraries that can change a result, as the runner found them."""

    python: str | None = None
    quorumbench: str | None = None
    torch: str | None = None
    transformers: str | None = None
    tokenizers: str | None = None
    peft: str | None = None
    gguf: str | None = None
    accelerate: str | None = None
    llama_cpp_python: str | None = None
    xllamacpp: str | None = None
    httpx: str | None = None
    numpy: str | None = None


class Hardware(_SetFieldsOnly):
    """Where and how a result was computed."""

    hardware: Machine | None = None
    libraries: Libraries | None = None
    batch_size: int | None = None
    device: str | None = Field(None, description="Where the model ran (cpu, cuda:0, …).")


class ResultPayload(_FromRunner):
    """What a runner submits for one lease; its canonical JSON is what it signs."""

    task_id: int
    score: float = Field(ge=0, le=1, description="The mean of ``sample_scores``.")
    n: int = Field(ge=1)
    sample_ids: list[str]
    sample_scores: list[float] = Field(description="Each sample's score in [0, 1].")
    sample_output_hashes: list[str] = Field(description="SHA-256 of each sample's raw output.")
    outputs_sha256: Sha256Hex = Field(description="Digest of the ordered output hashes.")
    runtime_s: float = Field(ge=0)
    hardware: Hardware = Field(default_factory=Hardware)
    model_revision: str | None = Field(None, description="The revision the runner loaded.")
    sample_predictions: list[Prediction] | None = added_field(
        "The canonical prediction per sample (``evaluation/predictions.py``). A server "
        "requires it; it is optional in the schema so an older runner's result gets a "
        "message naming the upgrade."
    )
    predictions_sha256: Sha256Hex | None = added_field(
        "SHA-256 of the canonical JSON of ``sample_predictions``."
    )
    measurements: Measurements | None = added_field(
        "Energy, CO2, latency, throughput and memory measured around the evaluation "
        "(docs/efficiency.md): signed and logged with the result, never ranked."
    )
    engine: Engine | None = added_field(
        "The engine family that evaluated (protocol 1.3); its version is in "
        "``hardware.libraries``. The server refuses a result whose engine is not the "
        "one its task names."
    )


class ResultSignature(_FromRunner):
    """A runner's Ed25519 signature on one result (``core/signing.py`` says over what)."""

    key_id: Sha256Hex = Field(description="SHA-256 (hex) of the raw public key.")
    signed_at: str = Field(
        max_length=40, description="ISO 8601 time of signing, with a UTC offset."
    )
    value: str = Field(pattern=r"^[0-9a-f]{128}$", description="Ed25519 signature (hex).")


class Submission(_FromRunner):
    """``POST /v0/leases/{id}/result``: a signed result, and optionally the next pull."""

    protocol_version: Version = Field(
        UNVERSIONED, description="The runner's protocol (absent: 1.0)."
    )
    attempt: Attempt
    result: ResultPayload
    signature: ResultSignature = Field(
        description="The runner's Ed25519 signature over the result (see docs/server.md)."
    )
    next_pull_key: PullKey | None = Field(
        None, description="Also pull the next task, with this idempotency key (see ``next``)."
    )
    engines: list[Engine] | None = added_field(
        "The runner's engines for the next pull, as in ``LeaseRequest.engines`` (1.3).",
        max_length=len(ENGINES),
    )


# -- edge tasks (protocol 1.2) ---------------------------------------------------------


class EdgeStat(_FromRunner):
    """Mean and sample standard deviation of one figure over the measured runs."""

    mean: float = Field(ge=0, allow_inf_nan=False)
    sd: float = Field(ge=0, allow_inf_nan=False)
    n: int = Field(ge=1, le=MAX_ID)


class EdgeRunOut(_FromRunner):
    """One edge run, as the runner measured it (``evaluation/edge.py``)."""

    wall_s: float = Field(ge=0, allow_inf_nan=False)
    generated_tokens: int = Field(ge=0, le=MAX_ID)
    finish_reason: str = Field(max_length=16)
    prompt_tokens: int | None = Field(None, ge=0, le=MAX_ID)
    ttft_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    decode_tokens_per_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    peak_rss_bytes: int | None = Field(None, ge=0)
    peak_gpu_bytes: int | None = Field(None, ge=0)


class EdgeWorkload(_FromRunner):
    """The workload and repeat rule an edge result ran (the task's benchmark config)."""

    prompt_tokens: int = Field(ge=1, le=MAX_ID)
    gen_tokens: int = Field(ge=1, le=MAX_ID)
    warmup: int = Field(ge=0, le=MAX_ID)
    min_runs: int = Field(ge=1, le=MAX_ID)
    min_time_s: float = Field(ge=0, allow_inf_nan=False)
    max_runs: int = Field(ge=1, le=MAX_ID)


class EdgeReport(_FromRunner):
    """What a runner submits for an edge lease; its canonical JSON is what it signs.

    Each figure is the mean ± sd over ``runs`` (the server recomputes them from the
    runs and refuses a report whose figures do not follow); a figure the backend could
    not measure is null, with a note, never a guess."""

    task_id: int
    edge_version: int = Field(ge=1, description="The edge workload's version (its text).")
    settings: EdgeWorkload
    prefill_tokens_per_s: EdgeStat | None = None
    decode_tokens_per_s: EdgeStat | None = None
    ttft_s: EdgeStat | None = None
    wall_s: EdgeStat
    generated_tokens: EdgeStat
    forced_length: bool = Field(description="Every run generated exactly gen_tokens tokens.")
    peak_rss_bytes: int | None = Field(None, ge=0)
    peak_gpu_bytes: int | None = Field(None, ge=0)
    runs: list[EdgeRunOut] = Field(min_length=1, max_length=1_000)
    hardware: Hardware = Field(default_factory=Hardware)
    model_revision: str | None = Field(None, max_length=200)
    notes: list[Annotated[str, Field(max_length=500)]] = Field(default_factory=list, max_length=20)


class EdgeSubmission(_FromRunner):
    """``POST /v0/leases/{id}/edge``: a signed edge report (protocol 1.2 and later)."""

    protocol_version: Version = Field(description="The runner's protocol (1.2 or later).")
    attempt: Attempt
    result: EdgeReport
    signature: ResultSignature = Field(
        description="The runner's Ed25519 signature over the report (see docs/server.md)."
    )


class Receipt(_FromServer):
    """The server's answer to a submission."""

    result_id: int
    task_id: int
    task_status: TaskStatus
    round: int
    duplicate: bool = Field(description="The same result was submitted under this lease before.")
    next: LeaseGrant | None = Field(
        None, description="The next lease when ``next_pull_key`` was sent and a task was free."
    )


# -- versions -----------------------------------------------------------------------


def _parts(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor)


def accepted_versions() -> str:
    """The versions this server accepts, in words (``1.0``, ``1.0 to 1.3``, ``1.0, 2.0``)."""
    own_major, own_minor = _parts(PROTOCOL_VERSION)
    ranges = []
    for major in sorted(ACCEPTED_MAJORS):
        top = own_minor if major == own_major else 0
        ranges.append(f"{major}.0" if top == 0 else f"{major}.0 to {major}.{top}")
    return ", ".join(ranges)


def speaks(version: str, since: str) -> bool:
    """Whether a runner of protocol ``version`` knows what ``since`` added."""
    return _parts(version) >= _parts(since)


def check_version(version: str) -> None:
    """Refuse a runner whose protocol this server does not accept; say what to do."""
    major, minor = _parts(version)
    own_major, own_minor = _parts(PROTOCOL_VERSION)
    newer = (major, minor) > (own_major, own_minor)
    if major in ACCEPTED_MAJORS and not newer:
        return
    if newer:
        fix = (
            "the runner is newer than this server; run a quorumbench that speaks "
            f"{accepted_versions()} (the server's own version)"
        )
    else:
        fix = f"upgrade quorumbench on the runner ({UPGRADE_COMMAND})"
    raise UnsupportedProtocolError(
        f"this server accepts runner protocol {accepted_versions()}; this runner speaks "
        f"{version}: {fix}",
        version,
        accepted_versions(),
    )
