"""A scripted backend for tests and examples (no model, no network).

Like inspect_ai's ``mockllm``: generation answers come from a function of the
prompt, multiple-choice scores from a function of the request. Tests build a
:class:`MockBackend` with their own functions; a ``mock:`` ref loads one of the
scripts below through ``load_backend``, like any other backend:

```
mock:empty@<revision>         answers nothing
mock:echo@<revision>          answers with the prompt's text
mock:say/<text>@<revision>    answers <text>, percent-decoded (mock:say/%23%23%23%23%204)
```

Multiple choice prefers the shortest continuation. The revision (a 40-hex commit or
64-hex SHA-256, as every plugin-style ref carries) pins nothing here: it is recorded
as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import unquote

from quorumbench.backends._plugin import BackendOptions
from quorumbench.errors import InvalidRefError
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
from quorumbench.evaluation.refs import ModelRef


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
        info: ModelInfo | None = None,
    ) -> None:
        self._answer = answer
        self._score = score
        self._info = info or ModelInfo("mock:scripted", "mock", "0" * 64, is_chat)
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


SCRIPTS = ("empty", "echo", "say/<text>")


def _script(script: str) -> Callable[[str], str] | None:
    if script == "empty":
        return lambda _: ""
    if script == "echo":
        return lambda prompt: prompt
    if script.startswith("say/"):
        text = unquote(script.removeprefix("say/"))
        return lambda _: text
    return None


def load_mock_backend(ref: ModelRef, options: BackendOptions) -> MockBackend:
    """The backend of a ``mock:`` ref (the module docstring lists its scripts)."""
    answer = _script(ref.location)
    if answer is None:
        raise InvalidRefError(
            f"unknown mock script {ref.location!r} in {ref.canonical()}; "
            f"known: {', '.join(SCRIPTS)}"
        )
    info = ModelInfo(ref.canonical(), "mock", ref.revision or "", is_chat=True)
    return MockBackend(answer, info=info)
