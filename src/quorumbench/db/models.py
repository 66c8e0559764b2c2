"""ORM models (SQLAlchemy 2, typed ``Mapped[]`` columns). Tables are plural.

Accounts authenticate with scoped API tokens today; federated identities and runner
signing keys slot in as extra tables/columns (``runners.public_key`` is reserved).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from quorumbench.db.types import EnumText, UTCDateTime
from quorumbench.protocol import TaskStatus

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON, list[Any]: JSON}


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    scopes: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class Runner(Base):
    __tablename__ = "runners"
    __table_args__ = (UniqueConstraint("account_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    public_key: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime | None]
    agreements: Mapped[int] = mapped_column(Integer, default=0)
    outliers: Mapped[int] = mapped_column(Integer, default=0)
    suspended: Mapped[bool] = mapped_column(Boolean, default=False)


class Model(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(primary_key=True)
    ref: Mapped[str] = mapped_column(String(512), unique=True)
    name: Mapped[str] = mapped_column(String(256))
    owner_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    revision: Mapped[str] = mapped_column(String(64))
    weights_sha256: Mapped[str | None] = mapped_column(String(64), unique=True)
    params: Mapped[int | None] = mapped_column(BigInteger)
    architecture: Mapped[str | None] = mapped_column(String(128))
    context_length: Mapped[int | None] = mapped_column(Integer)
    dtype: Mapped[str | None] = mapped_column(String(32))
    quantization: Mapped[str | None] = mapped_column(String(32))
    license: Mapped[str | None] = mapped_column(String(64))
    base_ref: Mapped[str | None] = mapped_column(String(512))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime]
    paused_at: Mapped[datetime | None] = mapped_column(default=None)
    """Set when the model's tasks kept failing; not scheduled until its owner resumes it."""
    paused_reason: Mapped[str | None] = mapped_column(String(1000), default=None)
    retired_at: Mapped[datetime | None] = mapped_column(default=None)
    """Set when its owner (or an admin) retired it (``active`` is then false): it is off
    the board and the schedule; its tasks, results and log entries stay."""
    family: Mapped[str | None] = mapped_column(String(64), default=None)
    """Its architecture family (``llama``), as detected or as submitted."""
    engine: Mapped[str | None] = mapped_column(String(16), default=None)
    """The engine family that evaluates it (``evaluation.refs.engine_for``; protocol
    1.3): every task of the model names it. Null: the runner's choice (a plugin's
    scheme)."""

    __table_args__ = (
        Index("ix_models_owner_created", "owner_id", "created_at"),
        Index("ix_models_name", "name", "id"),  # the leaderboard sorted by model
        Index("ix_models_retired_at", "retired_at"),  # the few retired ones, off the board
    )


class Benchmark(Base):
    __tablename__ = "benchmarks"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    prompt_version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    dataset_sha256: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    samples_per_task: Mapped[int] = mapped_column(Integer)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    """Its weight within its pillar (core/pillars.py)."""
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime]
    pillar: Mapped[str | None] = mapped_column(String(16), default=None)
    """Its pillar, set at every startup from the settings, a custom spec or the built-in
    assignment (services/benchmarks.py); None for a version no server has run since."""
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """A benchmark created through the API (``POST /v0/benchmarks``): its validated
    custom spec, whose data is referenced by URL and SHA-256 (never stored here). None
    for a benchmark the server's settings name (built-in, plugin or spec file)."""
    source_url: Mapped[str | None] = mapped_column(String(2000), default=None)
    """The data URL of a benchmark created through the API (as its spec gives it)."""
    owner_id: Mapped[int | None] = mapped_column(Integer, default=None)
    """The account (id) that created it through the API (it, or an admin, may retire
    it). No foreign key: SQLite would copy the table that tasks reference to add one."""
    first_epoch: Mapped[int | None] = mapped_column(Integer, default=None)
    """The first epoch it is scheduled in (the one after its creation); None: any."""
    retired_at: Mapped[datetime | None] = mapped_column(default=None)
    """Set when its owner (or an admin) retired it (``active`` is then false); its
    tasks and results stay. A retired benchmark is not activated again at startup."""


class AccountGrant(Base):
    """A change to what an account may do beyond its tokens' scopes, append-only.

    Today one permission has grants: ``benchmark:create``. The account holds it while
    its latest row says ``grant``: given automatically (``by_account_id`` None) once
    the account has ``benchmark_create_after`` accepted evaluations agreeing with
    consensus, or by an admin; an admin's ``revoke`` takes it away (and stops the
    automatic grant from coming back).
    """

    __tablename__ = "account_grants"
    __table_args__ = (Index("ix_account_grants_account_permission", "account_id", "permission"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    permission: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(8))
    """``grant`` or ``revoke``."""
    by_account_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id"), default=None)
    """The admin who granted or revoked it; None: granted automatically."""
    reason: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime]


class Epoch(Base):
    __tablename__ = "epochs"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    seed: Mapped[str] = mapped_column(String(64))
    seed_commitment: Mapped[str] = mapped_column(String(64))
    scheduled_at: Mapped[datetime | None]


TASK_EPOCH, TASK_DEEPEN, TASK_POOL_FINAL = "epoch", "deepen", "pool_final"
"""``Task.purpose``: drawn by the epoch's seed (the board's), deepening a plan's slice
(``services/deepen.py``: chosen by label, so never in the leaderboard rows), or a
prize pool's held-out final split (``services/pool_final.py``: a hidden benchmark,
never on the board)."""
TASK_EDGE = "edge"
"""``Task.purpose`` of an edge task: the edge workload measured on the runners'
hardware, never scored (services/edge_tasks.py)."""


def _partial(name: str, columns: str, where: str, unique: bool = False) -> Index:
    """An index of ``columns`` (space-separated) over the rows ``where`` holds."""
    sql = text(where)
    return Index(name, *columns.split(), unique=unique, postgresql_where=sql, sqlite_where=sql)


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        # One epoch task per (model, benchmark, epoch); one deepen task per part.
        _partial(
            "uq_tasks_epoch_pair", "model_id benchmark_id epoch_id", "purpose = 'epoch'", True
        ),
        _partial(
            "uq_tasks_deepen_part", "plan_id model_id benchmark_id part", "purpose = 'deepen'", True
        ),
        _partial(
            "ix_tasks_deepen_open", "requested_by", "purpose = 'deepen' AND finalized_at IS NULL"
        ),
        # One edge task per (model, edge benchmark, epoch).
        _partial("uq_tasks_edge_epoch", "model_id benchmark_id epoch_id", "purpose = 'edge'", True),
        # One held-out task per (pool, model, part).
        _partial(
            "uq_tasks_pool_final_part", "pool_id model_id part", "purpose = 'pool_final'", True
        ),
        Index("ix_tasks_model_benchmark", "model_id", "benchmark_id"),
        # Claimable tasks are a small, hot subset: keep their lookup off the history.
        _partial("ix_tasks_claimable", "priority id", "finalized_at IS NULL AND open_slots > 0"),
        Index("ix_tasks_status_id", "status", "id"),
        Index("ix_tasks_epoch_id", "epoch_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    epoch_id: Mapped[int] = mapped_column(ForeignKey("epochs.id"))
    n_samples: Mapped[int] = mapped_column(Integer)
    status: Mapped[TaskStatus] = mapped_column(EnumText(TaskStatus), default=TaskStatus.PENDING)
    round: Mapped[int] = mapped_column(Integer, default=1)
    quorum: Mapped[int] = mapped_column(Integer)
    open_slots: Mapped[int] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    sample_ids: Mapped[list[Any]] = mapped_column(default=list)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime]
    finalized_at: Mapped[datetime | None]
    canary: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """For a canary: the settled per-sample answers it is checked against and their
    source tasks. Never shown to runners, and public only once the task is final."""
    chance_sum: Mapped[float | None] = mapped_column(Float, default=None)
    """The sum of its samples' chance levels (``Sample.chance``), set when it is DONE."""
    purpose: Mapped[str] = mapped_column(String(16), default=TASK_EPOCH, server_default=TASK_EPOCH)
    plan_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """A deepen task's plan (the SHA-256 of its public form) and number (``part``) among
    that plan's tasks of its (model, benchmark), and who asked (an account id)."""
    part: Mapped[int | None] = mapped_column(Integer, default=None)
    requested_by: Mapped[int | None] = mapped_column(Integer, default=None)
    pool_id: Mapped[int | None] = mapped_column(Integer, default=None)
    """A held-out task's pool (``purpose = 'pool_final'``; ``part`` numbers its tasks
    per model)."""


class LeaseState(StrEnum):
    """Where a lease stands; only an ACTIVE lease may be extended, released or submitted."""

    ACTIVE = "ACTIVE"
    SUBMITTED = "SUBMITTED"
    """Its result is stored (ended)."""
    RELEASED = "RELEASED"
    """Given back by its runner (ended); the slot reopened at once."""
    FAILED = "FAILED"
    """Its runner could not evaluate the task (ended, with the reason); the account is
    not offered the task again."""
    EXPIRED = "EXPIRED"
    """Not heartbeated in time (ended); the slot reopened."""


LIVE_LEASE = f"state IN ('{LeaseState.ACTIVE}', '{LeaseState.SUBMITTED}')"


class Lease(Base):
    __tablename__ = "leases"
    __table_args__ = (
        Index("ix_leases_task_account", "task_id", "account_id"),
        # One live lease per (task, account): see queue/sql.py.
        Index(
            "uq_leases_live_task_account",
            "task_id",
            "account_id",
            unique=True,
            postgresql_where=text(LIVE_LEASE),
            sqlite_where=text(LIVE_LEASE),
        ),
        UniqueConstraint("runner_id", "pull_key"),
        Index(
            "ix_leases_active_expiry",
            "expires_at",
            postgresql_where=text(f"state = '{LeaseState.ACTIVE}'"),
            sqlite_where=text(f"state = '{LeaseState.ACTIVE}'"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    runner_id: Mapped[int] = mapped_column(ForeignKey("runners.id"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    round: Mapped[int] = mapped_column(Integer)
    state: Mapped[LeaseState] = mapped_column(EnumText(LeaseState), default=LeaseState.ACTIVE)
    leased_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    pull_key: Mapped[str | None] = mapped_column(String(64))
    """The runner's idempotency key of the pull that made this lease, if it sent one."""
    failure: Mapped[str | None] = mapped_column(String(500))
    """Why the runner could not evaluate the task, for a FAILED lease."""


class Result(Base):
    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("task_id", "account_id"),
        # a runner's measurement flags (its page, the runners list)
        Index("ix_results_runner_flagged", "runner_id", "measurement_outlier"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    lease_id: Mapped[int] = mapped_column(ForeignKey("leases.id"), unique=True)
    runner_id: Mapped[int] = mapped_column(ForeignKey("runners.id"))
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    round: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer)
    outputs_sha256: Mapped[str] = mapped_column(String(64))
    sample_scores: Mapped[list[Any]] = mapped_column(default=list)
    sample_output_hashes: Mapped[list[Any]] = mapped_column(default=list)
    runtime_s: Mapped[float] = mapped_column(Float)
    hardware: Mapped[dict[str, Any]] = mapped_column(default=dict)
    payload_sha256: Mapped[str] = mapped_column(String(64))
    counted: Mapped[bool] = mapped_column(Boolean, default=True)
    outlier: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_at: Mapped[datetime]
    model_revision: Mapped[str | None] = mapped_column(String(200))
    key_id: Mapped[str | None] = mapped_column(String(64))
    """The runner key that signed it (None only for rows from before signatures)."""
    signed_at: Mapped[str | None] = mapped_column(String(40))
    signature: Mapped[str | None] = mapped_column(String(128))
    predictions_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    """SHA-256 of the canonical per-sample predictions (the same for any batch size)."""
    sample_predictions: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    """The canonical prediction of each sample (chosen option index, extracted answer)."""
    measurements: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """What the runner measured around the evaluation (``protocol.Measurements``, as
    signed; None when it sent none): hardware data, never part of consensus."""
    engine: Mapped[str | None] = mapped_column(String(16), default=None)
    """The engine family that made it (``ResultPayload.engine``, as signed; None when the
    runner named none: before protocol 1.3)."""
    hardware_class: Mapped[str | None] = mapped_column(String(200), default=None, index=True)
    """``core.efficiency.hardware_class`` of its machine, set when stored (None for results
    stored before migration 0024; the cross-check then computes it from ``hardware``)."""
    measurement_outlier: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    """Its energy per sample was more than ``measurement_outlier_factor`` off its hardware
    class's median when its task became DONE (``services/measurement_check.py``). Shown on
    the runner's page; it changes no score, consensus or reputation."""


class ConsensusOutcome(Base):
    __tablename__ = "consensus_outcomes"
    __table_args__ = (UniqueConstraint("task_id", "round"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    round: Mapped[int] = mapped_column(Integer)
    status: Mapped[TaskStatus] = mapped_column(EnumText(TaskStatus))
    score: Mapped[float | None] = mapped_column(Float)
    spread: Mapped[float | None] = mapped_column(Float)
    agreeing: Mapped[list[Any]] = mapped_column(default=list)
    outliers: Mapped[list[Any]] = mapped_column(default=list)
    sample_consensus: Mapped[list[Any]] = mapped_column(default=list)
    sample_agreement: Mapped[list[Any]] = mapped_column(default=list)
    decided_at: Mapped[datetime]


class LeaderboardEntry(Base):
    __tablename__ = "leaderboard_entries"
    __table_args__ = (
        # covering the board's standings (score and interval of every row, for ranks)
        Index(
            "ix_leaderboard_benchmark_score",
            "benchmark_id",
            "score",
            "model_id",
            "ci_low",
            "ci_high",
        ),
        # one index per sort key, so every ordering of a benchmark's board pages by index
        Index("ix_leaderboard_benchmark_ci_low", "benchmark_id", "ci_low", "model_id"),
        Index("ix_leaderboard_benchmark_n_samples", "benchmark_id", "n_samples", "model_id"),
        Index("ix_leaderboard_benchmark_updated_at", "benchmark_id", "updated_at", "model_id"),
    )

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), primary_key=True)
    n_tasks: Mapped[int] = mapped_column(Integer)
    n_samples: Mapped[int] = mapped_column(Integer)
    weighted_sum: Mapped[float] = mapped_column(Float)
    sample_sum: Mapped[float] = mapped_column(Float)
    sample_sumsq: Mapped[float] = mapped_column(Float)
    score: Mapped[float] = mapped_column(Float)
    stderr: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime]
    chance_sum: Mapped[float | None] = mapped_column(Float, default=None)
    """The sum of the chance levels of its tasks' samples (the mean chance level is
    ``chance_sum / n_samples``, core/pillars.py); None while not known (rows from
    before migration 0014, until the next startup fills them in)."""


class LeaderboardAggregate(Base):
    """A model's weighted aggregate over pillars (core/pillars.py), one row per model.

    Kept current in the transaction that finalizes a task (services/leaderboard.py) and
    rebuilt at startup when the active benchmarks, their weights or pillars, or the
    pillar weights change (``basis``). Only ``complete`` rows (a score on every pillar
    of positive weight) are ranked; each sort key pages through an index.
    """

    __tablename__ = "leaderboard_aggregates"
    __table_args__ = (
        Index(  # covering the board's standings too (for ranks)
            "ix_leaderboard_aggregates_score", "complete", "score", "model_id", "ci_low", "ci_high"
        ),
        Index("ix_leaderboard_aggregates_ci_low", "complete", "ci_low", "model_id"),
        Index("ix_leaderboard_aggregates_n_samples", "complete", "n_samples", "model_id"),
        Index("ix_leaderboard_aggregates_updated_at", "complete", "updated_at", "model_id"),
    )

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    n_benchmarks: Mapped[int] = mapped_column(Integer)
    complete: Mapped[bool] = mapped_column(Boolean)
    n_tasks: Mapped[int] = mapped_column(Integer)
    n_samples: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    stderr: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime]
    basis: Mapped[str] = mapped_column(String(64))
    """``aggregate_basis`` of the benchmarks, weights, pillars and pillar weights this row
    was computed with (core/pillars.py ``rule_basis``)."""
    pillars: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Each pillar with a score: {pillar: {score, stderr, ci_low, ci_high}}."""
    missing_pillars: Mapped[list[Any]] = mapped_column(default=list)
    """Pillars of positive weight without a score (empty: ``complete``)."""


class LogEntry(Base):
    """One finalized task in the public append-only log (services/publiclog.py), or a
    record that is not a task (a settled pool's payout: no ``task_id``)."""

    __tablename__ = "log_entries"

    leaf_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"), unique=True)
    leaf_hash: Mapped[str] = mapped_column(String(64))
    entry: Mapped[dict[str, Any]]
    appended_at: Mapped[datetime]


class TreeHead(Base):
    """A signed tree head: one per log size, made in the transaction that appended."""

    __tablename__ = "tree_heads"

    size: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    root: Mapped[str] = mapped_column(String(64))
    timestamp: Mapped[str] = mapped_column(String(40))
    key_id: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(128))


class LogState(Base):
    """The log's single row: its size and compact range; appends lock it in turn."""

    __tablename__ = "log_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    size: Mapped[int] = mapped_column(Integer)
    frontier: Mapped[list[Any]]
    key_id: Mapped[str | None] = mapped_column(String(64), default=None)
    """The key that signs the next tree head (a server with another key refuses to start)."""


class LogKeyRotation(Base):
    """A change of the log's signing key: the old and the new key both sign a statement
    naming each other and the tree head (size, root) after which the new key signs."""

    __tablename__ = "log_key_rotations"

    id: Mapped[int] = mapped_column(primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    root: Mapped[str] = mapped_column(String(64))
    timestamp: Mapped[str] = mapped_column(String(40))
    old_key_id: Mapped[str] = mapped_column(String(64), unique=True)
    old_public_key: Mapped[str] = mapped_column(String(64))
    new_key_id: Mapped[str] = mapped_column(String(64), unique=True)
    new_public_key: Mapped[str] = mapped_column(String(64))
    old_signature: Mapped[str] = mapped_column(String(128))
    new_signature: Mapped[str] = mapped_column(String(128))


class RunnerKey(Base):
    """An Ed25519 public key a runner signs its results with (services/runner_keys.py).

    Registering a new key for a runner revokes its previous ones (rotation); a
    revoked key signs nothing the server accepts from then on.
    """

    __tablename__ = "runner_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    runner_id: Mapped[int] = mapped_column(ForeignKey("runners.id"), index=True)
    key_id: Mapped[str] = mapped_column(String(64), unique=True)
    public_key: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
