"""The model-backend contract: requests in, results out.

A backend answers two kinds of request. A :class:`GenerateRequest` asks for greedy
text until a stop sequence, the end-of-sequence token or ``max_new_tokens``. A
:class:`ChoiceRequest` asks which of several continuations the model prefers, by
log-likelihood when the backend can compute it, else by a letter-choice prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Progress = Callable[[int], None]
"""Called with the number of requests just finished."""


def no_progress(_: int) -> None:
    """A progress callback that ignores progress."""


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a chat prompt."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Prompt:
    """Either plain text or chat messages, never both."""

    text: str | None = None
    messages: tuple[ChatMessage, ...] | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.messages is None):
            raise ValueError("a prompt is either text or messages")


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy generation until a stop sequence, EOS or ``max_new_tokens``.

    A speed measurement (``evaluation/edge.py``) sets ``ignore_eos`` (EOS does not
    stop: exactly ``max_new_tokens`` are generated where the backend allows it) and
    clears ``cache_prefix`` (the whole prompt is prefilled, reusing no cached prefix of
    an earlier request). Backends that cannot honour them ignore them, and the
    result's ``n_tokens`` and ``finish_reason`` say what happened.
    """

    prompt: Prompt
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 256
    ignore_eos: bool = False
    cache_prefix: bool = True


FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class GenerateResult:
    """Generated text, already cut at the first stop sequence."""

    text: str
    n_tokens: int
    finish_reason: FinishReason


@dataclass(frozen=True)
class ChoiceRequest:
    """Pick one of ``continuations`` after ``context``.

    ``question`` and ``options`` feed the letter-choice fallback, which shows the
    options in ``letter_order`` (a permutation of their indices) so the gold is not
    always ``A``.
    """

    context: str
    continuations: tuple[str, ...]
    question: str
    options: tuple[str, ...]
    letter_order: tuple[int, ...]


ChoiceMethod = Literal["loglikelihood", "letter"]


@dataclass(frozen=True)
class ChoiceResult:
    """Per-option log-likelihoods (``method == "loglikelihood"``), or the option a
    letter-choice prompt picked (``method == "letter"``, ``chosen`` set, ``raw_text``
    holding the model's reply)."""

    method: ChoiceMethod
    loglikelihoods: tuple[float, ...] = ()
    chosen: int | None = None
    raw_text: str = ""
    n_tokens: int = 0
    """Continuation tokens scored (summed over options), or tokens generated for a letter."""


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is, for the result file."""

    ref: str
    backend: str
    revision: str
    is_chat: bool
    device: str = "cpu"
    dtype: str = ""
    details: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class ModelBackend(Protocol):
    """A loaded model that answers requests. Implementations must be deterministic."""

    @property
    def info(self) -> ModelInfo: ...

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]: ...

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]: ...

    def count_tokens(self, text: str) -> int: ...

    def close(self) -> None: ...
