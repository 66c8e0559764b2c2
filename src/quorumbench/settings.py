"""Settings read from the environment (prefix ``QB_``) and an optional ``.env`` file.

There is no settings object at import time: entry points call :func:`get_settings`,
tests build :class:`EvalSettings` directly. Command-line flags override these values.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from quorumbench.ask_settings import AskSettings
from quorumbench.core.taxonomy import SEED_PILLAR_WEIGHTS, normalised_weights, pillar_problem
from quorumbench.edge_settings import EdgeServerSettings
from quorumbench.errors import ConfigError
from quorumbench.pool_settings import PoolSettings
from quorumbench.settings_auth import OAUTH_PRESETS as OAUTH_PRESETS
from quorumbench.settings_auth import OAuthProvider as OAuthProvider
from quorumbench.settings_auth import OidcIssuer as OidcIssuer


class EvalSettings(BaseSettings):
    """Settings of the evaluation engine and ``quorumbench eval``."""

    model_config = SettingsConfigDict(
        env_prefix="QB_", env_file=".env", extra="ignore", frozen=True
    )

    datasets_dir: Path | None = Field(
        None,
        description="Local benchmark data laid out like shared/datasets; unset means the Hub.",
    )
    cache_dir: Path | None = Field(
        None,
        description="Cache for converted GGUF models; unset means ~/.cache/quorumbench.",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        description="Bearer key for openai: endpoints; never printed, logged or stored.",
    )
    carbon_intensity: str | None = Field(
        None,
        description="Carbon intensity of the grid for a run's CO2: a country code or g CO2/kWh; "
        "unset means the world average (docs/efficiency.md).",
    )

    @field_validator("carbon_intensity")
    @classmethod
    def _carbon_intensity(cls, value: str | None) -> str | None:
        return check_carbon_intensity(value)


def check_carbon_intensity(value: str | None) -> str | None:
    """A carbon intensity setting that ``core.efficiency.carbon_intensity`` reads."""
    from quorumbench.core.efficiency import carbon_intensity

    if value is None or not value.strip():
        return None
    carbon_intensity(value)  # a ValueError that says what to write
    return value.strip()


@lru_cache(maxsize=1)
def get_settings() -> EvalSettings:
    """The process-wide settings, read once (CLI and entry points only); a bad value is
    one :class:`ConfigError` line."""
    try:
        return EvalSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid settings: {problems}") from None


def default_data_dir() -> Path:
    """Where the server keeps its state when nothing else is configured:
    ``$XDG_DATA_HOME/quorumbench`` (``~/.local/share/quorumbench``)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "quorumbench"


class QueueSettings(BaseModel):
    """The task queue: in the database (default) or Redis Streams."""

    model_config = {"frozen": True}

    backend: Literal["sql", "redis"] = Field(
        "sql", description="sql (in the database) or redis (Redis Streams)."
    )
    redis_url: str | None = Field(
        None, description="redis://host:port/db, required when backend is redis."
    )
    stream: str = Field("qb:tasks", description="Redis stream key of the task queue.")


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 in brackets or not) is this machine only."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


DEFAULT_BENCHMARKS = (
    "gsm8k",
    "truthfulqa-mc1",
    "arith",
    "gen-reasoning",
    "humaneval",
    "gen-language",
    "gen-safety",
)
"""The server's default benchmarks: seed 000's MVP (GSM8K and TruthfulQA, read from
the Hub or ``datasets_dir``) and one offline benchmark per pillar (math: arith,
reasoning: gen-reasoning, coding: humaneval, language: gen-language, safety:
gen-safety)."""


class ServerSettings(AskSettings, PoolSettings, EdgeServerSettings, BaseSettings):
    """Settings of ``quorumbench serve`` (environment prefix ``QB_``, nested ``__``)."""

    model_config = SettingsConfigDict(
        env_prefix="QB_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
        frozen=True,
    )

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Directory of the default SQLite database.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; unset means SQLite (WAL) at <data_dir>/quorumbench.db. "
        "PostgreSQL: postgresql+psycopg://user@host/db.",
    )
    queue: QueueSettings = Field(default_factory=QueueSettings, description="Task queue.")
    epoch_seconds: int = Field(3600, ge=10, description="Length of an epoch.")
    lease_seconds: int = Field(600, ge=5, description="How long a pulled task stays leased.")
    hot_path_threads: int = Field(
        8, ge=1, le=64, description="Threads for runner requests (PostgreSQL or Redis queue)."
    )
    quorum: int = Field(3, ge=1, description="Results from distinct accounts a task needs.")
    agreement_threshold: float = Field(
        0.5, ge=0, le=1, description="Max score spread of agreeing results."
    )
    sample_tolerance: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Share of a task's samples (0-1) on which an agreeing result may "
        "differ from the per-sample consensus.",
    )
    quorum_step: int = Field(2, ge=1, description="Extra results asked for after a dispute.")
    max_rounds: int = Field(3, ge=1, description="Rounds before a task stays DISPUTED.")
    samples_per_task: int = Field(5, ge=1, description="Samples per task (default).")
    epoch_task_budget: int = Field(1000, ge=0, description="Most tasks created per epoch.")
    epoch_sample_budget: int = Field(
        5000,
        ge=0,
        description="Most samples all of an epoch's tasks ask for together (the community's "
        "compute per epoch: 1,000 shallow tasks of 5, or 50 deep ones of 100).",
    )
    depth_tiers: list[int] = Field(
        default_factory=lambda: [25, 100],
        description="Samples per task of the deeper tiers, after samples_per_task: a pair "
        "whose interval overlaps a rank neighbour's (or the top-k boundary), then such a "
        "pair within the top depth_top_k; [] keeps every task shallow.",
    )
    depth_top_k: int = Field(
        10, ge=0, description="The ranks whose order gets the deepest tier (top k)."
    )
    benchmarks: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BENCHMARKS),
        description="Benchmarks registered and scheduled at startup (default: seed 000's "
        "MVP, gsm8k and truthfulqa-mc1, plus one offline benchmark per pillar).",
    )
    pillars: dict[str, str] = Field(
        default_factory=dict,
        description="Benchmark name -> pillar (reasoning, coding, math, language, safety), "
        "overriding the built-in assignment (benchmarks.DEFAULT_PILLARS) and a custom "
        "spec's own pillar; every active benchmark needs one, or the server refuses to "
        "start. Part of the aggregate's basis.",
    )
    pillar_weights: dict[str, float] = Field(
        default_factory=lambda: dict(SEED_PILLAR_WEIGHTS),
        description="Weight of each of the five pillars in the aggregate (finite, >= 0, "
        "one positive), normalised to sum to 1; default seed 002's 0.35/0.20/0.15/0.20/"
        "0.20. A model is ranked on the aggregate only with a score on every pillar of "
        "positive weight. Part of the aggregate's basis.",
    )
    max_params: int = Field(
        20_000_000_000, ge=1, description="Largest model (parameters) that may register."
    )
    registrations_per_week: int = Field(
        3, ge=0, description="Models an account may register per 7 days (admins exempt)."
    )
    quota_evaluations: int = Field(
        3, ge=0, description="Accepted evaluations of others' models needed to register."
    )
    quota_window_hours: int = Field(24, ge=1, description="Window of the quota.")
    license_allowlist: list[str] = Field(
        default_factory=list,
        description="Licences a model may have to register (model-card ids such as "
        "apache-2.0 or mit, compared without case); empty: any licence, and a licence "
        "that cannot be detected is only a warning.",
    )
    allow_pickle: bool = Field(
        False,
        description="Accept models whose only weights are pickled *.bin files (their size "
        "is then estimated from the files' bytes); runners still need their own "
        "allow_pickle to load them.",
    )
    submission_rate_limit: str = Field(
        "30/minute",
        description="Validations, registrations and benchmark creations per account "
        "(limits syntax, ';'-separated; each reads the Hub or a URL; empty: no limit; "
        "admin requests exempt).",
    )
    outlier_limit: int = Field(
        5, ge=1, description="Outlier results after which a runner stops counting."
    )
    measurement_outlier_factor: float = Field(
        3.0,
        gt=1.0,
        le=1e6,
        description="Flag a DONE task's result on its runner's page when its energy per sample "
        "is more than this factor above or below its hardware class's median (classes of "
        "one never flag; flags change no score, consensus or reputation).",
    )
    pause_after_failed_tasks: int = Field(
        3,
        ge=0,
        description="Pause a model after this many consecutive failed tasks (its owner "
        "resumes it; 0: never pause).",
    )
    allow_private_endpoints: bool = Field(
        False,
        description="Allow registering openai: endpoints on loopback, private, link-local "
        "or metadata addresses (tests and private deployments; every runner calls them).",
    )
    allow_private_data_urls: bool = Field(
        False,
        description="Allow benchmark data URLs (POST /v0/benchmarks) on loopback, private, "
        "link-local or metadata addresses, and plain http (tests and private deployments).",
    )
    benchmark_data_max_bytes: int = Field(
        50 * 1024 * 1024,
        ge=1,
        description="Largest data file a benchmark created through the API may reference.",
    )
    benchmark_fetch_timeout_s: float = Field(
        30.0, gt=0, description="Timeout of each request fetching a benchmark's data URL."
    )
    benchmark_create_after: int = Field(
        50,
        ge=0,
        description="Accepted evaluations agreeing with consensus after which an account "
        "gets benchmark:create automatically (0: only an admin grants it).",
    )
    canary_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Share of tasks that, once settled, are kept open for one more "
        "runner as a canary (a spot check of that runner).",
    )
    canary_window_s: float = Field(
        1800,
        gt=0,
        description="How long a settled task waits for its canary result before it "
        "is published anyway.",
    )
    web_cache_s: float = Field(
        10,
        ge=0,
        description="How long the web leaderboard reuses its ranked rows before it reads "
        "them again (0: every request reads).",
    )
    scheduler_interval_s: float = Field(
        5.0, gt=0, description="How often the server checks epochs and expired leases."
    )
    write_rate_limit: str = Field(
        "100/second;3000/minute",
        description="Writes per account (limits syntax, ';'-separated; empty: no limit).",
    )
    rate_limit_storage: str = Field(
        "memory://", description="Where rate-limit windows live: memory:// or redis://..."
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body accepted (413 above)."
    )
    jwt_issuer: str = Field(
        "quorumbench", description="The iss claim of the access JWTs this server issues."
    )
    access_token_minutes: int = Field(15, ge=1, le=1440, description="Lifetime of an access JWT.")
    refresh_token_days: int = Field(30, ge=1, description="Lifetime of a login session.")
    auth_key_file: Path | None = Field(
        None,
        description="Ed25519 key (PEM) that signs access JWTs; default "
        "<data_dir>/auth-signing-key.pem, made on the server's first start.",
    )
    oidc_issuers: list[OidcIssuer] = Field(
        default_factory=list,
        description="OIDC issuers whose ID tokens open a session (JSON list of "
        "{issuer, audience, jwks_url, algorithms}).",
    )
    log_key_file: Path | None = Field(
        None,
        description="Ed25519 key (PEM) that signs the public log's tree heads; "
        "default <data_dir>/log-signing-key.pem, made on the first start of a new log.",
    )
    log_key: SecretStr | None = Field(
        None,
        description="The log's Ed25519 key itself (PEM, PKCS#8), e.g. from a secret store, "
        "instead of QB_LOG_KEY_FILE; never printed or logged.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least important server log lines written (stderr)."
    )
    log_format: Literal["kv", "json"] = Field(
        "kv", description="Server log lines as key=value text or as JSON objects."
    )
    access_log: bool = Field(False, description="Also log every HTTP request (one line each).")
    oauth_providers: list[OAuthProvider] = Field(
        default_factory=list,
        description="OAuth login providers (JSON list of {name, client_id, client_secret, "
        "...}; a github entry needs only those three).",
    )
    login_return_path: str | None = Field(
        None,
        pattern=r"^/([^/\\#\s][^#\s]*)?$",
        description="A local path the browser is sent to after an OAuth login, with the "
        "session in the URL fragment; unset: the callback answers JSON.",
    )
    insecure_dev_login: bool = Field(
        False,
        description="INSECURE, development only: POST /v0/auth/dev-login opens a session "
        "for any account without credentials; refused unless bound to loopback.",
    )
    deepen_max_models: int = Field(10, ge=1, description="Most models per deepen request.")
    deepen_max_tasks: int = Field(50, ge=1, description="Most tasks per deepen request.")
    deepen_max_open: int = Field(3, ge=1, description="Most open deepen plans per account.")

    @field_validator("data_dir", "log_key_file", "auth_key_file", mode="after")
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        """State paths as they are printed and logged: absolute, ``~`` expanded."""
        return None if path is None else path.expanduser().absolute()

    @model_validator(mode="after")
    def _redis_needs_url(self) -> ServerSettings:
        if self.queue.backend == "redis" and not self.queue.redis_url:
            raise ConfigError("QB_QUEUE__BACKEND=redis needs QB_QUEUE__REDIS_URL")
        return self

    @model_validator(mode="after")
    def _rising_tiers(self) -> ServerSettings:
        depths = [self.samples_per_task, *self.depth_tiers]
        if any(b <= a for a, b in zip(depths, depths[1:], strict=False)):
            raise ConfigError(
                f"QB_DEPTH_TIERS {self.depth_tiers} must rise above QB_SAMPLES_PER_TASK "
                f"({self.samples_per_task}), e.g. [25, 100]"
            )
        return self

    @model_validator(mode="after")
    def _pillars(self) -> ServerSettings:
        try:
            normalised_weights(self.pillar_weights)
        except ValueError as exc:
            raise ConfigError(f"QB_PILLAR_WEIGHTS {self.pillar_weights}: {exc}") from exc
        for name, pillar in sorted(self.pillars.items()):
            problem = pillar_problem(pillar)
            if problem:
                raise ConfigError(f"QB_PILLARS gives benchmark {name!r} a {problem}")
        return self

    @model_validator(mode="after")
    def _one_log_key(self) -> ServerSettings:
        if self.log_key is not None and self.log_key_file is not None:
            raise ConfigError("set QB_LOG_KEY or QB_LOG_KEY_FILE, not both")
        return self

    @model_validator(mode="after")
    def _unique_providers(self) -> ServerSettings:
        names = [provider.name for provider in self.oauth_providers]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigError(f"QB_OAUTH_PROVIDERS names {', '.join(repeated)} twice")
        return self

    def oauth_provider(self, name: str) -> OAuthProvider | None:
        return next((p for p in self.oauth_providers if p.name == name), None)

    def check_listen_address(self, host: str) -> None:
        """Refuse to serve the insecure development login on anything but loopback."""
        if self.insecure_dev_login and not is_loopback(host):
            raise ConfigError(
                f"QB_INSECURE_DEV_LOGIN lets anyone log in as anyone: it is refused on "
                f"{host!r}; listen on 127.0.0.1 (or ::1) or turn it off"
            )

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'quorumbench.db'}"


def default_runner_name() -> str:
    """This machine's host name, reduced to what a runner name may contain."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname()).strip("-._")[:64]
    return name or "default"


def check_server_url(url: str) -> str:
    """``url`` without a trailing slash, or a ValueError saying how to write it.

    A runner's server URL is the server's root: ``http(s)://host[:port][/prefix]``.
    """
    url = url.strip()
    if not url.lower().startswith(("http://", "https://")):
        example = f"http://{url}" if "://" not in url else "http://host:port"
        raise ValueError(
            f"{url!r} is not an http:// or https:// URL; write it as {example} (or https://…)"
        )
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host name")
    path = f"{parts.path.rstrip('/')}/"
    if "/v0/" in path:
        root = f"{parts.scheme}://{parts.netloc}{path[: path.index('/v0/')]}"
        raise ValueError(f"drop /v0: the server URL is its root ({root}), not its API")
    return url.rstrip("/")


class RunnerSettings(BaseSettings):
    """Settings of ``quorumbench runner start`` (environment prefix ``QB_RUNNER_``)."""

    model_config = SettingsConfigDict(
        env_prefix="QB_RUNNER_",
        env_file=".env",
        extra="ignore",
        frozen=True,
        populate_by_name=True,  # datasets_dir has aliases; flags pass it by name
    )

    server_url: str = Field(
        "http://127.0.0.1:8000",
        description="Root URL of the QuorumBench server (http:// or https://, without /v0).",
    )
    token: SecretStr | None = Field(
        None,
        description="API token (qb_...) with the task:pull and task:submit scopes; "
        "never printed or logged.",
    )
    name: str = Field(
        default_factory=default_runner_name,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Runner name within the account (default: the host name).",
    )
    datasets_dir: Path | None = Field(
        None,
        validation_alias=AliasChoices("QB_RUNNER_DATASETS_DIR", "QB_DATASETS_DIR"),
        description="Local benchmark data laid out like shared/datasets (QB_RUNNER_DATASETS_DIR, "
        "else QB_DATASETS_DIR); unset means the Hub.",
    )
    cache_dir: Path | None = Field(
        None,
        description="Cache for converted GGUF models; unset means ~/.cache/quorumbench.",
    )
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N.")
    batch_size: int = Field(8, ge=1, description="Rows per batch when evaluating.")
    max_loaded_models: int = Field(
        1, ge=1, le=4, description="Models kept loaded between tasks (least recently used go)."
    )
    min_idle_backoff_s: float = Field(
        2.0, gt=0, description="First wait after the server had no work (then doubled)."
    )
    max_idle_backoff_s: float = Field(
        30.0, gt=0, description="Longest wait between pulls while the server has no work."
    )
    request_timeout_s: float = Field(30.0, gt=0, description="Timeout of one HTTP request.")
    key_file: Path | None = Field(
        None,
        description="Ed25519 key the runner signs results with (`quorumbench runner init` "
        "makes it); unset means $XDG_CONFIG_HOME/quorumbench/runner-keys/<server>/<account>/"
        "<name>.key.",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        description="Key for tasks whose model is an openai: endpoint; never printed, "
        "logged or written.",
    )
    sandbox: Literal["auto", "bwrap", "unshare", "none"] = Field(
        "auto",
        description="Where model code runs: auto (bubblewrap, else unshare), bwrap, unshare, "
        "or none (in the runner's own process; only through --no-sandbox or this variable).",
    )
    memory_limit_mb: int | None = Field(
        None,
        ge=512,
        description="Address space of a sandboxed worker in MiB (RLIMIT_AS); unset means "
        "three quarters of this machine's memory.",
    )
    process_limit: int = Field(
        512, ge=16, description="Processes and threads a sandboxed worker may have."
    )
    task_time_limit_s: float = Field(
        3600.0,
        gt=0,
        description="Wall time of one task (download, load and evaluation); past it the "
        "sandbox is killed and the task fails.",
    )
    allow_pickle: bool = Field(
        False, description="Load pickled weights (.bin/.pt), which can run code when loaded."
    )
    trust_remote_code: bool = Field(
        False, description="Run a model repository's own Python code (transformers auto_map)."
    )
    allow_private_endpoints: bool = Field(
        False,
        description="Evaluate openai: endpoints on loopback, private or link-local addresses "
        "(refused by default: every runner would call something on its own network).",
    )
    allow_private_data_urls: bool = Field(
        False,
        description="Fetch benchmark data URLs on loopback, private or link-local addresses, "
        "and plain http (refused by default; for a private server's benchmarks).",
    )
    carbon_intensity: str | None = Field(
        None,
        validation_alias=AliasChoices("QB_RUNNER_CARBON_INTENSITY", "QB_CARBON_INTENSITY"),
        description="Carbon intensity of this machine's grid for a result's CO2: a country "
        "code or g CO2/kWh (QB_RUNNER_CARBON_INTENSITY, else QB_CARBON_INTENSITY); unset "
        "means the world average.",
    )

    @field_validator("carbon_intensity")
    @classmethod
    def _carbon_intensity(cls, value: str | None) -> str | None:
        return check_carbon_intensity(value)

    @field_validator("server_url")
    @classmethod
    def _server_url(cls, value: str) -> str:
        return check_server_url(value)
