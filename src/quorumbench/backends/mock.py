"""A scripted backend for tests and examples (no model, no network).

Like inspect_ai's ``mockllm``: generation answers come from a function of the
prompt, multiple-choice scores from a function of the request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Progress,
    Prompt,
    no_progress,
)
from quorumbench.evaluation.extract import truncate_at_stop


def _prompt_text(prompt: Prompt) -> str:
    if prompt.text is not None:
        return prompt.text
    return "\n".join(m.content for m in prompt.messages or ())


class MockBackend:
    """Answers from scripts; records every request it saw."""

    def __init__(
        self,
        answer: Callable[[str], str] = lambda _: "",
        score: Callable[[ChoiceRequest], Sequence[float]] | None = None,
        *,
        is_chat: bool = True,
    ) -> None:
        self._answer = answer
        self._score = score
        self._info = ModelInfo("mock:scripted", "mock", "0" * 64, is_chat)
        self.seen: list[GenerateRequest | ChoiceRequest] = []
        self.closed = False

    @property
    def info(self) -> ModelInfo:
        return self._info

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]:
        results = []
        for request in requests:
            self.seen.append(request)
            raw = self._answer(_prompt_text(request.prompt))
            text, stopped = truncate_at_stop(raw, request.stop)
            words = text.split()
            if len(words) > request.max_new_tokens:
                text = " ".join(words[: request.max_new_tokens])
                results.append(GenerateResult(text, request.max_new_tokens, "length"))
            else:
                results.append(GenerateResult(text, len(words), "stop" if stopped else "eos"))
            progress(1)
        return results

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]:
        results = []
        for request in requests:
            self.seen.append(request)
            if self._score is None:
                lls = [-float(len(c)) for c in request.continuations]
            else:
                lls = list(self._score(request))
            results.append(ChoiceResult("loglikelihood", tuple(lls), n_tokens=len(lls)))
            progress(1)
        return results

    def close(self) -> None:
        self.closed = True
