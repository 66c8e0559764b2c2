"""What a backend reports about its own work while an evaluation is measured.

:func:`recording_usage` opens a :class:`BackendUsage` for the current thread (a
``ContextVar``); a backend that can time itself asks :func:`current_usage` and, when
it gets one, adds prompt tokens, each prefill's time to first token and the time it
spent decoding. Backends that cannot tell (an OpenAI-compatible endpoint without
streaming) add nothing, and the measurement leaves those fields absent. Recording
never changes what a backend computes: it only reads the clock around it.

A sandboxed backend's model lives in another process, which records its own usage and
hands it back (:meth:`BackendUsage.to_json`, :meth:`BackendUsage.merge`), with that
process's CPU seconds and memory peaks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

_CURRENT: ContextVar[BackendUsage | None] = ContextVar("quorumbench_usage", default=None)


@dataclass
class BackendUsage:
    """Counters a backend fills in while it is measured (all optional)."""

    prompt_tokens: int | None = None
    """Tokens the model read (prompts; contexts and options for log-likelihoods)."""
    ttft_s: list[float] = field(default_factory=list)
    """One time to first token per prefill: from the start of a prefill (one sequence
    in continuous batching, or one static batch) to its first generated token."""
    decode_s: float | None = None
    """Seconds spent in decoding steps (after the first tokens, prefills excluded)."""
    other_cpu_s: float = 0.0
    """CPU seconds another process (a sandboxed worker) spent on this evaluation."""
    other_peak_rss_bytes: int | None = None
    """The resident-memory peak of that process, which holds the model."""
    peak_gpu_bytes: int | None = None
    """Peak GPU memory that process allocated (torch), when it ran on CUDA."""

    def add_prompt_tokens(self, n: int) -> None:
        self.prompt_tokens = (self.prompt_tokens or 0) + n

    def add_first_token(self, seconds: float) -> None:
        self.ttft_s.append(seconds)

    def add_decode(self, seconds: float) -> None:
        self.decode_s = (self.decode_s or 0.0) + seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "ttft_s": list(self.ttft_s),
            "decode_s": self.decode_s,
            "other_cpu_s": self.other_cpu_s,
            "other_peak_rss_bytes": self.other_peak_rss_bytes,
            "peak_gpu_bytes": self.peak_gpu_bytes,
        }

    def merge(self, data: dict[str, Any]) -> None:
        """Add what another process recorded (its :meth:`to_json`); bad values raise
        ValueError rather than becoming a measurement."""
        prompt = _count(data.get("prompt_tokens"))
        if prompt is not None:
            self.add_prompt_tokens(prompt)
        for value in data.get("ttft_s") or []:
            self.add_first_token(_seconds(value))
        decode = data.get("decode_s")
        if decode is not None:
            self.add_decode(_seconds(decode))
        self.other_cpu_s += _seconds(data.get("other_cpu_s") or 0.0)
        rss = _count(data.get("other_peak_rss_bytes"))
        if rss is not None:
            self.other_peak_rss_bytes = max(rss, self.other_peak_rss_bytes or 0)
        gpu = _count(data.get("peak_gpu_bytes"))
        if gpu is not None:
            self.peak_gpu_bytes = max(gpu, self.peak_gpu_bytes or 0)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count, got {value!r}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise ValueError(f"expected seconds, got {value!r}")
    return float(value)


def current_usage() -> BackendUsage | None:
    """The usage being recorded in this context, or None when nothing is measured."""
    return _CURRENT.get()


@contextmanager
def recording_usage() -> Iterator[BackendUsage]:
    """Record backend usage inside the block."""
    usage = BackendUsage()
    token = _CURRENT.set(usage)
    try:
        yield usage
    finally:
        _CURRENT.reset(token)
