"""The edge benchmark: prefill and decode speed, latency and memory on this machine,
in the style of llama.cpp's ``llama-bench`` (docs/efficiency.md, "The edge benchmark").

One workload, the same for every runner: a plain-text prompt of exactly
``prompt_tokens`` tokens (:data:`EDGE_TEXT` repeated and cut with the model's own
tokenizer, see :func:`edge_prompt`; cut again by the prompt tokens the model reports
reading when its first run reads another number, as an endpoint whose tokenizer is
only estimated here does), then exactly ``gen_tokens`` greedy tokens (EOS
does not stop them where the backend allows it), batch size 1, no prompt prefix reused
from an earlier run. ``warmup`` runs come first and are not counted; then runs repeat
until both ``min_runs`` runs and ``min_time_s`` seconds of measured runs are reached,
or ``max_runs`` runs, whichever comes first (:func:`needs_another_run`).

Each run is measured by :class:`~quorumbench.evaluation.measure.Measurer`: the backend
reports its own time to first token and decode time (``evaluation/usage.py``), and the
measurer samples peak memory. An OpenAI-compatible endpoint streams its answer and
gives them as seen from the client, network included; figures a backend cannot give (an
endpoint that refuses streaming has no time to first token, one that sends no token
counts in its stream no decode rate) are absent from the result, with a note saying
why, never invented.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.efficiency import MeanSd, hardware_class, mean_sd
from quorumbench.errors import BackendError, ConfigError
from quorumbench.evaluation.backend import GenerateRequest, ModelBackend, Prompt
from quorumbench.evaluation.environment import hardware, library_versions
from quorumbench.evaluation.measure import Measurer
from quorumbench.evaluation.usage import recording_usage

EDGE_TEXT = (
    "The old lighthouse stood at the end of a narrow spit of land, where the river met "
    "the sea. Every evening the keeper climbed one hundred and twelve steps, trimmed the "
    "wick, wound the clockwork that turned the lens, and wrote the weather in a ledger: "
    "wind from the west, light rain, three ships passing north before midnight. In "
    "winter the storms came in long grey lines, and the spray reached the gallery "
    "windows; in summer the fishing boats went out at dawn and came back heavy with "
    "mackerel. Children from the village brought bread and letters on Saturdays, and "
    "asked how far the beam could reach. Twenty miles, the keeper told them, farther on "
    "a clear night, and every sailor who saw it knew exactly where the rocks were. "
)
"""The fixed text the edge prompt is made of (written for this benchmark; plain
English, no special tokens). Changing it changes every edge figure: bump
:data:`EDGE_VERSION` with it."""

EDGE_VERSION = 1
"""The workload's version: :data:`EDGE_TEXT` and the rules of :func:`edge_prompt`."""

EDGE_KIND = "edge"
"""The ``kind`` of an edge task's benchmark (``protocol.TaskBenchmark.kind``)."""


def workload_sha256() -> str:
    """SHA-256 of the workload's definition (its version and text): the
    ``dataset_sha256`` of the server's edge benchmark, so a runner whose edge text
    differs from the server's refuses the task, and a signature binds the text."""
    return sha256_hex(canonical_json({"edge_version": EDGE_VERSION, "text": EDGE_TEXT}))


def edge_benchmark_name(prompt_tokens: int, gen_tokens: int) -> str:
    """The server's name for the edge benchmark of one workload (``edge-512-128``)."""
    return f"{EDGE_KIND}-{prompt_tokens}-{gen_tokens}"


_MAX_CHARS_PER_TOKEN = 64
"""A text this many characters a token long that still counts short of the prompt
length is a model that does not read it (truncation), not a tokenizer."""

_CUT_SEARCH_CHARS = 64
"""How far around the first prefix that reaches the length :func:`edge_prompt` looks
for one of exactly that many tokens."""


@dataclass(frozen=True)
class EdgeSettings:
    """The workload and the repeat rule (defaults as llama-bench's ``-p 512 -n 128``)."""

    prompt_tokens: int = 512
    gen_tokens: int = 128
    warmup: int = 1
    min_runs: int = 5
    min_time_s: float = 10.0
    max_runs: int = 50

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "gen_tokens", "min_runs", "max_runs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.warmup < 0:
            raise ConfigError(f"warmup must be 0 or more, not {self.warmup}")
        if not 0 <= self.min_time_s < 86_400:
            raise ConfigError(f"min_time_s must be between 0 and a day, not {self.min_time_s}")
        if self.max_runs < self.min_runs:
            raise ConfigError(
                f"max_runs ({self.max_runs}) must be at least min_runs ({self.min_runs})"
            )

    def to_config(self) -> dict[str, int | float]:
        """The settings as an edge benchmark's ``config`` (what a task hands out)."""
        return dict(asdict(self))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EdgeSettings:
        """The settings an edge task's benchmark ``config`` gives; ConfigError when it
        names other options or a value of the wrong type."""
        names = {f.name for f in fields(cls)}
        if set(config) != names:
            raise ConfigError(
                f"an edge task's config needs exactly {', '.join(sorted(names))}; "
                f"it has {', '.join(sorted(config)) or 'nothing'}"
            )
        values: dict[str, Any] = {}
        for name in names:
            value = config[name]
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if not numeric or (name != "min_time_s" and not isinstance(value, int)):
                raise ConfigError(f"edge option {name} is {value!r}, not a number of the kind")
            values[name] = float(value) if name == "min_time_s" else value
        return cls(**values)


def needs_another_run(runs: int, elapsed_s: float, settings: EdgeSettings) -> bool:
    """Whether to measure another run after ``runs`` runs that took ``elapsed_s``
    seconds together: until both the minimum count and the minimum time are reached,
    never beyond the maximum count."""
    if runs >= settings.max_runs:
        return False
    return runs < settings.min_runs or elapsed_s < settings.min_time_s


def edge_prompt(
    backend: ModelBackend, n_tokens: int, count: Callable[[str], int] | None = None
) -> str:
    """:data:`EDGE_TEXT` repeated and cut to the shortest prefix that the backend's
    tokenizer counts as exactly ``n_tokens`` tokens (``count_tokens``, which is what a
    plain-text prompt costs; or ``count``, e.g. what the model reports it read).
    BackendError when no prefix near the cut has exactly that many (a tokenizer that
    jumps over the count), or when the text does not grow in tokens as it grows."""
    count = count or backend.count_tokens
    text = EDGE_TEXT
    while count(text) < n_tokens:
        if len(text) > _MAX_CHARS_PER_TOKEN * n_tokens:
            raise BackendError(
                f"{len(text):,} characters of the edge text count as fewer than {n_tokens} tokens"
            )
        text += EDGE_TEXT
    low, high = 1, len(text)  # the shortest prefix with at least n_tokens tokens
    while low < high:
        mid = (low + high) // 2
        if count(text[:mid]) >= n_tokens:
            high = mid
        else:
            low = mid + 1
    for delta in range(_CUT_SEARCH_CHARS + 1):
        for end in (low + delta, low - delta):
            if 0 < end <= len(text) and count(text[:end]) == n_tokens:
                return text[:end]
    raise BackendError(f"cannot cut the edge prompt to exactly {n_tokens} tokens")


def _tokens_read(backend: ModelBackend, text: str) -> int:
    """How many prompt tokens the model reports reading for ``text`` (one request that
    generates a single token); BackendError when it reports none."""
    request = GenerateRequest(Prompt(text=text), max_new_tokens=1, cache_prefix=False)
    with recording_usage() as usage:
        backend.generate([request], batch_size=1)
    if usage.prompt_tokens is None:
        raise BackendError("the backend does not report how many prompt tokens it read")
    return usage.prompt_tokens


@dataclass(frozen=True)
class EdgeRun:
    """One measured (or warm-up) run, as the backend and the measurer saw it."""

    wall_s: float
    generated_tokens: int
    finish_reason: str
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens ÷ time to first token (None without either)."""
        if self.ttft_s is None or not self.ttft_s > 0 or self.prompt_tokens is None:
            return None
        return self.prompt_tokens / self.ttft_s


def _stat(values: list[float | None]) -> MeanSd | None:
    """Mean ± sd of the runs' values; None unless every run has one."""
    if not values or any(v is None for v in values):
        return None
    return mean_sd([v for v in values if v is not None])


def _peak(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class EdgeResult:
    """What the edge benchmark measured, with the settings and machine it ran on."""

    model: dict[str, str]
    settings: EdgeSettings
    hardware: dict[str, Any]
    hardware_class: str
    libraries: dict[str, str]
    runs: tuple[EdgeRun, ...]
    warmup_runs: tuple[EdgeRun, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def prefill_tokens_per_s(self) -> MeanSd | None:
        return _stat([r.prefill_tokens_per_s for r in self.runs])

    @property
    def decode_tokens_per_s(self) -> MeanSd | None:
        return _stat([r.decode_tokens_per_s for r in self.runs])

    @property
    def ttft_s(self) -> MeanSd | None:
        return _stat([r.ttft_s for r in self.runs])

    @property
    def wall_s(self) -> MeanSd:
        return mean_sd([r.wall_s for r in self.runs])

    @property
    def generated_tokens(self) -> MeanSd:
        return mean_sd([float(r.generated_tokens) for r in self.runs])

    @property
    def peak_rss_bytes(self) -> int | None:
        return _peak([r.peak_rss_bytes for r in self.runs])

    @property
    def peak_gpu_bytes(self) -> int | None:
        return _peak([r.peak_gpu_bytes for r in self.runs])

    @property
    def forced_length(self) -> bool:
        """Every measured run generated exactly ``gen_tokens`` tokens."""
        return all(r.generated_tokens == self.settings.gen_tokens for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        def stat(value: MeanSd | None) -> dict[str, Any] | None:
            return None if value is None else asdict(value)

        return {
            "edge_version": EDGE_VERSION,
            "model": dict(self.model),
            "settings": asdict(self.settings),
            "hardware": dict(self.hardware),
            "hardware_class": self.hardware_class,
            "libraries": dict(self.libraries),
            "prefill_tokens_per_s": stat(self.prefill_tokens_per_s),
            "decode_tokens_per_s": stat(self.decode_tokens_per_s),
            "ttft_s": stat(self.ttft_s),
            "wall_s": stat(self.wall_s),
            "generated_tokens": stat(self.generated_tokens),
            "forced_length": self.forced_length,
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_gpu_bytes": self.peak_gpu_bytes,
            "runs": [asdict(r) for r in self.runs],
            "warmup_runs": [asdict(r) for r in self.warmup_runs],
            "notes": list(self.notes),
        }


EdgeProgress = Callable[[str, int, float], None]
"""Called after each run with its phase (``"warmup"`` or ``"run"``), how many runs of
that phase are done, and the measured runs' seconds so far."""


def _no_progress(phase: str, done: int, elapsed_s: float) -> None:
    """Ignore progress."""


def _one_run(backend: ModelBackend, request: GenerateRequest) -> EdgeRun:
    with Measurer(backend.info.device) as measurer:
        (result,) = backend.generate([request], batch_size=1)
    m = measurer.measurements(generated_tokens=result.n_tokens, sequences=1)
    return EdgeRun(
        wall_s=measurer.wall_s,
        generated_tokens=result.n_tokens,
        finish_reason=result.finish_reason,
        prompt_tokens=m.prompt_tokens,
        ttft_s=m.ttft_s,
        decode_tokens_per_s=m.decode_tokens_per_s,
        peak_rss_bytes=m.peak_rss_bytes,
        peak_gpu_bytes=m.peak_gpu_bytes,
    )


def _notes(runs: tuple[EdgeRun, ...], settings: EdgeSettings) -> tuple[str, ...]:
    notes = []
    if any(r.ttft_s is None for r in runs):
        notes.append(
            "the backend reports no time to first token (an endpoint that does not "
            "stream): no TTFT and no prefill tokens/s"
        )
    if any(r.decode_tokens_per_s is None for r in runs):
        notes.append(
            "the backend reports no decode time (an endpoint that does not stream or "
            "sends no token counts): no decode tokens/s"
        )
    if any(r.generated_tokens != settings.gen_tokens for r in runs):
        counts = sorted({r.generated_tokens for r in runs})
        notes.append(
            f"the backend could not be held to {settings.gen_tokens} generated tokens "
            f"(it stopped at {', '.join(map(str, counts))}): decode figures use the "
            "tokens it did generate"
        )
    if any(r.peak_rss_bytes is None for r in runs):
        notes.append("resident memory could not be read on this system")
    return tuple(notes)


def _edge_request(text: str, settings: EdgeSettings) -> GenerateRequest:
    return GenerateRequest(
        Prompt(text=text),
        max_new_tokens=settings.gen_tokens,
        ignore_eos=True,
        cache_prefix=False,
    )


def _recut(backend: ModelBackend, wanted: int, read: int) -> str:
    """The edge prompt cut by the prompt tokens the model reports reading, for a backend
    whose own count is an estimate (an endpoint: its tokenizer is not known here).
    BackendError, naming what the model read, when that cannot be done."""
    try:
        return edge_prompt(backend, wanted, lambda text: _tokens_read(backend, text))
    except BackendError as exc:
        raise BackendError(
            f"the model read {read} prompt tokens, not {wanted} (does the prompt and its "
            f"generation fit its context window?), and cutting the prompt by the tokens "
            f"it reports did not work either: {exc.message}"
        ) from exc


def run_edge(
    backend: ModelBackend,
    settings: EdgeSettings,
    progress: EdgeProgress = _no_progress,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> EdgeResult:
    """Run the edge workload on a loaded backend (see the module docstring).

    ``clock`` times each run for the minimum-time rule (tests script it)."""
    wanted = settings.prompt_tokens
    requests = [_edge_request(edge_prompt(backend, wanted), settings)]

    def checked_run() -> EdgeRun:
        run = _one_run(backend, requests[0])
        read = run.prompt_tokens
        if read is None or read == wanted:
            return run
        if len(requests) == 1:  # the first run: cut again by what the model reads
            requests.insert(0, _edge_request(_recut(backend, wanted, read), settings))
            return checked_run()
        raise BackendError(
            f"the model read {read} prompt tokens, not {wanted} "
            "(does the prompt and its generation fit its context window?)"
        )

    warmups = []
    for done in range(1, settings.warmup + 1):
        warmups.append(checked_run())
        progress("warmup", done, 0.0)
    runs: list[EdgeRun] = []
    elapsed = 0.0
    while needs_another_run(len(runs), elapsed, settings):
        started = clock()
        run = checked_run()
        elapsed += clock() - started
        runs.append(run)
        progress("run", len(runs), elapsed)
    info = backend.info
    machine = hardware(info.device)
    measured = tuple(runs)
    return EdgeResult(
        model={
            "ref": info.ref,
            "backend": info.backend,
            "revision": info.revision,
            "device": info.device,
            "dtype": info.dtype,
        },
        settings=settings,
        hardware=machine,
        hardware_class=hardware_class(machine),
        libraries=library_versions(),
        runs=measured,
        warmup_runs=tuple(warmups),
        notes=_notes(measured, settings),
    )
