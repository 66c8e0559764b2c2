"""A model behind an OpenAI-compatible HTTP endpoint (OpenAI, vLLM, llama.cpp, TGI…).

Generation goes to ``/chat/completions`` (chat prompts) or ``/completions`` (plain
text), greedy (``temperature: 0``). Multiple choice is scored the way
lm-evaluation-harness's ``local-completions`` model does it: ``context +
continuation`` is sent to ``/completions`` with ``echo`` and ``logprobs`` and the
log-probabilities of the continuation's tokens are summed. One new token is asked for
(``max_tokens: 1``) and ignored: llama.cpp's servers read ``max_tokens: 0`` as "no
limit" and would generate to the end of the context. An endpoint that cannot
echo log-probabilities makes the backend fall back, once and for good, to a
letter-choice prompt through ``/chat/completions``.

Generation is streamed (server-sent events, :mod:`quorumbench.backends.openai_stream`)
to time each request's first token and decoding; the chunks are joined back into the
answer the plain call gives, so predictions are the same. An endpoint that refuses a
streamed request (HTTP 400, 415, 422 or 501 before any stream has worked) gets it
again without streaming, and every later one too, and reports no timings; so does one
that answers a plain JSON document instead of a stream. One whose stream carries no
token count (it ignores ``stream_options``) has that request sent again without
streaming, for its count, and is not streamed to again: its first answers give a time
to first token, none a decode rate.

Requests run concurrently (at most ``max_concurrency`` at a time) on an
``httpx.AsyncClient``; connection errors, timeouts, HTTP 429 and 5xx are retried
with exponential backoff (honouring ``Retry-After``), and so is a stream that breaks
off or ends early (``timeout_s`` bounds each wait for data, not a whole stream). Other
4xx answers fail at once
with :class:`~quorumbench.errors.EndpointError`; so does a redirect (never followed).
Pass :func:`~quorumbench.evaluation.endpoints.pinned_transport` as ``transport`` to
connect only to checked public addresses.

The API key is sent as ``Authorization: Bearer …`` and nowhere else: it is kept in a
:class:`~pydantic.SecretStr`, scrubbed from every error message, never logged, and no
httpx error (whose request holds the header) travels on as an exception's cause or
context.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, NoReturn, TypeVar

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends.openai_http import (
    KeepOpen,
    Session,
    Transient,
    decode_answer,
    error_detail,
    in_order,
    public_url,
    retry_after_seconds,
    sanitize,
)
from quorumbench.backends.openai_scoring import (
    LETTER_INSTRUCTION,
    LETTERS,
    EchoUnsupported,
    chat_content,
    check_echo_alignment,
    completion_tokens,
    continuation_logprob,
    letter_prompt,
    parse_letter,
    prompt_tokens,
)
from quorumbench.backends.openai_stream import (
    BrokenStream,
    Streamed,
    StreamTiming,
    is_event_stream,
    read_stream,
    record_streams,
    streaming,
)
from quorumbench.errors import BackendError, EndpointError, InvalidRefError
from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    FinishReason,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Progress,
    no_progress,
)
from quorumbench.evaluation.endpoints import PinnedTransport
from quorumbench.evaluation.extract import AFTER_PYTHON_BLOCK, truncate_at_stop
from quorumbench.evaluation.refs import ModelRef
from quorumbench.evaluation.usage import BackendUsage, current_usage

__all__ = [
    "ECHO_MAX_TOKENS",
    "LETTERS",
    "LETTER_INSTRUCTION",
    "OpenAICompatBackend",
    "check_echo_alignment",
    "continuation_logprob",
    "letter_prompt",
    "load_openai_backend",
    "parse_letter",
    "retry_after_seconds",
    "sanitize",
]

T = TypeVar("T")
Json = dict[str, Any]
Sleep = Callable[[float], Awaitable[None]]

MAX_SERVER_STOPS = 4
"""OpenAI accepts at most four stop sequences; the rest are applied locally."""
MAX_RETRY_AFTER_S = 120.0
"""A server's ``Retry-After`` is honoured up to this many seconds."""
_FATAL_5XX = {501, 505}
_UNSUPPORTED_STATUS = {404, 405, 501}
_NO_STREAM_STATUS = {400, 415, 422, 501}
"""Answers to a streamed request that may mean "no streaming here": the request is
sent again without streaming, and so are all later ones."""
ECHO_MAX_TOKENS = 1
"""New tokens asked for with an echoed prompt; ignored. Not 0: llama.cpp reads 0 as no limit."""


class _Answer(NamedTuple):
    """A decoded generation answer and, when it was streamed, when its chunks came."""

    data: Json
    timing: StreamTiming | None


class _Generated(NamedTuple):
    result: GenerateResult
    timing: StreamTiming | None


class OpenAICompatBackend:
    """A model served by an OpenAI-compatible endpoint.

    Args:
        ref: An ``openai:<base url>#<model name>`` reference.
        options: Shared backend options: ``api_key``, ``timeout_s``,
            ``max_concurrency`` and ``max_retries`` (retries after the first attempt).
        transport: An httpx transport to use instead of the default (tests pass an
            ``httpx.MockTransport``); the backend never closes it. A
            :class:`~quorumbench.evaluation.endpoints.PinnedTransport` (from
            ``pinned_transport``) is copied for each call instead (its connections
            belong to that call's event loop) and each copy is closed with the call.
        backoff_s: First retry delay; each further retry doubles it.
        max_backoff_s: Longest delay between retries (``Retry-After`` aside).
        sleep: The coroutine used to wait between retries.
        letter_max_tokens: Tokens allowed for the reply to a letter-choice prompt.
    """

    def __init__(
        self,
        ref: ModelRef,
        options: BackendOptions,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Sleep = asyncio.sleep,
        letter_max_tokens: int = 16,
    ) -> None:
        if ref.scheme != "openai" or not ref.model_name:
            raise InvalidRefError(f"{ref.canonical()} is not an openai:<base url>#<model> ref")
        self._ref = ref
        self._base = ref.location.rstrip("/")
        self._model = ref.model_name
        self._key = options.api_key
        self._timeout = options.timeout_s
        self._concurrency = max(1, options.max_concurrency)
        self._attempts = max(0, options.max_retries) + 1
        self._transport = transport
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._letter_max_tokens = letter_max_tokens
        self._letters = False
        self._echo_trusted = False
        self._stream: bool | None = None  # None: no streamed request answered yet
        self._info: ModelInfo | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAICompatBackend(ref={self._ref.canonical()!r})"

    @property
    def uses_letters(self) -> bool:
        """Whether multiple choice has fallen back to letter-choice prompts."""
        return self._letters

    # -- plumbing ------------------------------------------------------------------

    def _secret(self) -> str | None:
        return self._key.get_secret_value() if self._key else None

    def _client(self) -> httpx.AsyncClient:
        headers = {"Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.get_secret_value()}"
        transport: httpx.AsyncBaseTransport | None = None
        if isinstance(self._transport, PinnedTransport):
            # Each call runs its own event loop: a copy whose connections the client
            # closes with it, under the same rules.
            transport = self._transport.fresh()
        elif self._transport is not None:
            transport = KeepOpen(self._transport)
        limits = httpx.Limits(max_connections=self._concurrency)
        return httpx.AsyncClient(
            base_url=self._base + "/",
            headers=headers,
            timeout=httpx.Timeout(self._timeout),
            transport=transport,
            limits=limits,
        )

    def _run(self, work: Callable[[Session], Awaitable[T]]) -> T:
        """Run ``work`` on a fresh client and event loop, from sync code."""
        if self._closed:
            raise BackendError(f"{self!r} is closed")

        async def main() -> T:
            async with self._client() as client:
                return await work(Session(client, asyncio.Semaphore(self._concurrency)))

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(main())
        with ThreadPoolExecutor(max_workers=1) as pool:  # called from async code
            return pool.submit(asyncio.run, main()).result()

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, Transient) and error.retry_after is not None:
            return min(error.retry_after, MAX_RETRY_AFTER_S)
        return float(min(self._backoff_s * 2 ** (state.attempt_number - 1), self._max_backoff_s))

    def _where(self, path: str) -> str:
        return public_url(f"{self._base}/{path}")

    def _failed(self, path: str, failure: str, transient: bool) -> NoReturn:
        # Called outside the except block: the httpx error (whose request carries the
        # Authorization header) does not travel on as __context__.
        message = f"{self._where(path)} failed: {sanitize(failure, self._secret())}"
        if transient:
            raise Transient(message)
        raise EndpointError(message)

    async def _send(self, session: Session, path: str, body: Json | None) -> httpx.Response:
        try:
            async with session.limit:
                if body is None:
                    return await session.client.get(path)
                return await session.client.post(path, json=body)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            failure, transient = type(exc).__name__, True
        except httpx.HTTPError as exc:  # a bad URL, an unsupported protocol, a decoding error
            failure, transient = f"{type(exc).__name__}: {exc}", False
        self._failed(path, failure, transient)

    async def _send_streaming(
        self, session: Session, path: str, body: Json, *, chat: bool
    ) -> httpx.Response | Streamed:
        """POST ``body`` and read the event stream, or the answer when it is not one.

        The clock starts once the request holds its concurrency slot, just before it
        is sent: waiting for a slot is not time to first token."""
        try:
            async with session.limit:
                sent_at = time.perf_counter()
                async with session.client.stream("POST", path, json=body) as response:
                    if not (200 <= response.status_code < 300 and is_event_stream(response)):
                        await response.aread()
                        return response
                    return await read_stream(response.aiter_lines(), chat=chat, sent_at=sent_at)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            failure, transient = type(exc).__name__, True
        except httpx.HTTPError as exc:
            failure, transient = f"{type(exc).__name__}: {exc}", False
        except BrokenStream as exc:
            failure, transient = f"the stream broke off: {exc}", True
        self._failed(path, failure, transient)

    def _check_transient(self, response: httpx.Response, path: str) -> None:
        """Raise :class:`Transient` for an answer worth retrying (429, most 5xx)."""
        status = response.status_code
        if status == 429 or (status >= 500 and status not in _FATAL_5XX):
            detail = sanitize(error_detail(response), self._secret())
            raise Transient(
                f"{self._where(path)} answered HTTP {status}: {detail}",
                retry_after_seconds(response.headers),
            )

    async def _retried(self, attempt: Callable[[], Awaitable[T]], attempts: int | None = None) -> T:
        """``attempt`` until it raises no :class:`Transient`, at most ``attempts`` times."""
        tries = attempts or self._attempts
        retrying = AsyncRetrying(
            stop=stop_after_attempt(tries),
            wait=self._wait,
            retry=retry_if_exception_type(Transient),
            sleep=self._sleep,
            reraise=True,
        )
        outcome: list[T] = []
        failure: str | None = None
        try:
            async for state in retrying:
                with state:
                    outcome.append(await attempt())
        except Transient as exc:
            failure = exc.message
        if failure is not None or not outcome:
            raise EndpointError(f"{failure} (gave up after {tries} tries)")
        return outcome[-1]

    async def _call(
        self,
        session: Session,
        path: str,
        body: Json | None = None,
        *,
        attempts: int | None = None,
    ) -> Json:
        """One API call with retries; the decoded JSON object of a 2xx answer."""

        async def attempt() -> httpx.Response:
            response = await self._send(session, path, body)
            self._check_transient(response, path)
            return response

        return self._decode(await self._retried(attempt, attempts), path)

    async def _completion(self, session: Session, path: str, body: Json, *, chat: bool) -> _Answer:
        """A generation answer with retries: streamed, timed, while the endpoint allows."""
        if self._stream is not False:

            async def attempt() -> httpx.Response | Streamed:
                got = await self._send_streaming(session, path, streaming(body), chat=chat)
                if isinstance(got, httpx.Response):
                    self._check_transient(got, path)
                return got

            got = await self._retried(attempt)
            if isinstance(got, Streamed) and got.timing.tokens is not None:
                if self._stream is None:
                    self._stream = True
                return _Answer(got.data, got.timing)
            if isinstance(got, Streamed):
                # No token count in the stream (``include_usage`` ignored): plain answers
                # keep theirs, as before streaming; this request is asked again for it.
                self._stream = False
                return _Answer(await self._call(session, path, body), got.timing)
            if got.status_code not in _NO_STREAM_STATUS or self._stream:
                data = self._decode(got, path)  # an error, or a plain answer
                if self._stream is None:
                    self._stream = False  # it ignored "stream": no need to ask again
                return _Answer(data, None)
            self._stream = False  # refused: asked without streaming from now on
        return _Answer(await self._call(session, path, body), None)

    def _decode(self, response: httpx.Response, path: str) -> Json:
        return decode_answer(response, self._where(path), self._secret())

    def _choice(self, data: Json, path: str) -> Json:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise EndpointError(f"{self._where(path)} answered without choices")
        choice: Json = choices[0]
        return choice

    # -- generation ----------------------------------------------------------------

    async def _generate_one(
        self, session: Session, request: GenerateRequest, usage: BackendUsage | None
    ) -> _Generated:
        stops = tuple(s for s in request.stop if s)
        body: Json = {"model": self._model, "temperature": 0, "max_tokens": request.max_new_tokens}
        if server_stops := [s for s in stops if s != AFTER_PYTHON_BLOCK]:  # a rule, cut here
            body["stop"] = server_stops[:MAX_SERVER_STOPS]
        messages = request.prompt.messages
        if messages is not None:
            path = "chat/completions"
            body["messages"] = [{"role": m.role, "content": m.content} for m in messages]
        else:
            path = "completions"
            body["prompt"] = request.prompt.text
        data, timing = await self._completion(session, path, body, chat=messages is not None)
        if usage is not None and (read := prompt_tokens(data)) is not None:
            usage.add_prompt_tokens(read)
        choice = self._choice(data, path)
        raw = chat_content(choice) if messages is not None else choice.get("text")
        text, cut = truncate_at_stop(raw if isinstance(raw, str) else "", stops)
        server_stop = choice.get("stop_reason")  # vLLM: the stop string that matched
        reason: FinishReason = "eos"
        if cut or (isinstance(server_stop, str) and server_stop in stops):
            reason = "stop"
        elif choice.get("finish_reason") == "length":
            reason = "length"
        return _Generated(GenerateResult(text, completion_tokens(data), reason), timing)

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]:
        """Greedy completions, in request order.

        ``batch_size`` is ignored: up to ``max_concurrency`` requests are in flight.
        When measured, the streamed answers' timings go to the current
        :class:`~quorumbench.evaluation.usage.BackendUsage` once all have arrived.
        """

        usage = current_usage()

        async def work(session: Session) -> list[GenerateResult]:
            async def one(request: GenerateRequest) -> _Generated:
                generated = await self._generate_one(session, request, usage)
                progress(1)
                return generated

            done = await in_order([one(r) for r in requests])
            if usage is not None:
                record_streams(usage, [g.timing for g in done])
            return [g.result for g in done]

        return self._run(work) if requests else []

    # -- multiple choice -----------------------------------------------------------

    async def _score_option(self, session: Session, context: str, option: str) -> tuple[float, int]:
        prompt = context + option
        body: Json = {
            "model": self._model,
            "prompt": prompt,
            "echo": True,
            "max_tokens": ECHO_MAX_TOKENS,  # generated after the prompt: ignored
            "logprobs": 1,
            "temperature": 0,
        }
        try:
            data = await self._call(session, "completions", body)
        except EndpointError as exc:
            message = exc.message.lower()
            if exc.status in _UNSUPPORTED_STATUS:
                raise EchoUnsupported(exc.message) from None
            if exc.status in (400, 422) and ("echo" in message or "logprob" in message):
                raise EchoUnsupported(exc.message) from None
            raise
        choice = self._choice(data, "completions")
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            raise EchoUnsupported("no logprobs in the answer")
        check_echo_alignment(choice, prompt)
        return continuation_logprob(logprobs, len(context), len(prompt))

    async def _by_letter(self, session: Session, request: ChoiceRequest) -> ChoiceResult:
        if len(request.options) > len(LETTERS):
            raise BackendError(f"a letter-choice prompt holds at most {len(LETTERS)} options")
        body: Json = {
            "model": self._model,
            "messages": [{"role": "user", "content": letter_prompt(request)}],
            "temperature": 0,
            "max_tokens": self._letter_max_tokens,
        }
        data = await self._call(session, "chat/completions", body)
        reply = chat_content(self._choice(data, "chat/completions"))
        position = parse_letter(reply, len(request.letter_order))
        chosen = request.letter_order[position] if position is not None else None
        return ChoiceResult(
            "letter", chosen=chosen, raw_text=reply, n_tokens=completion_tokens(data)
        )

    async def _choose_one(self, session: Session, request: ChoiceRequest) -> ChoiceResult:
        if not self._letters:
            context = request.context
            options = [self._score_option(session, context, c) for c in request.continuations]
            try:
                scored = await in_order(options)
            except EchoUnsupported:
                self._letters = True  # remembered: later requests skip the attempt
            else:
                self._echo_trusted = True
                return ChoiceResult(
                    "loglikelihood",
                    tuple(ll for ll, _ in scored),
                    n_tokens=sum(n for _, n in scored),
                )
        return await self._by_letter(session, request)

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]:
        """Log-likelihoods of the options, in request order.

        When the endpoint cannot echo log-probabilities, a letter-choice prompt
        picks the option instead. ``batch_size`` is ignored: up to
        ``max_concurrency`` requests are in flight.
        """

        async def work(session: Session) -> list[ChoiceResult]:
            async def one(request: ChoiceRequest) -> ChoiceResult:
                result = await self._choose_one(session, request)
                progress(1)
                return result

            if self._letters or self._echo_trusted:
                return await in_order([one(r) for r in requests])
            # The first request alone decides between log-probabilities and letters, so
            # every request of a run is scored the same way.
            first = await one(requests[0])
            return [first, *await in_order([one(r) for r in requests[1:]])]

        return self._run(work) if requests else []

    # -- the rest of the protocol --------------------------------------------------

    async def _served_model(self, session: Session) -> Json | None:
        try:
            data = await self._call(session, "models", attempts=1)
        except EndpointError:
            return None
        entries = data.get("data")
        if not isinstance(entries, list):
            return None
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == self._model:
                found: Json = entry
                return found
        return None

    @property
    def info(self) -> ModelInfo:
        """What is being evaluated; asks ``GET /models`` once (missing is fine)."""
        if self._info is None:
            entry = None if self._closed else self._run(self._served_model)
            revision = self._model
            details = {"endpoint_models": "unavailable" if entry is None else "listed"}
            if entry is not None:
                for key in ("root", "owned_by", "parent"):
                    value = entry.get(key)
                    if isinstance(value, str) and value:
                        details[key] = value
                root = details.get("root")
                if root and root != self._model:
                    revision = f"{self._model}@{root}"
            self._info = ModelInfo(
                ref=self._ref.canonical(),
                backend="openai-compat",
                revision=revision,
                is_chat=True,
                device="remote",
                details=details,
            )
        return self._info

    def count_tokens(self, text: str) -> int:
        """An estimate (four characters a token): the endpoint's tokenizer is unknown."""
        return len(text) // 4

    def close(self) -> None:
        """Stop answering requests. Clients live for one call, so none is left open."""
        self._closed = True


def load_openai_backend(ref: ModelRef, options: BackendOptions) -> OpenAICompatBackend:
    """The backend factory registered as ``openai-compat``.

    Args:
        ref: An ``openai:<base url>#<model name>`` reference.
        options: Backend options; ``api_key`` is sent as a bearer token.

    Returns:
        A backend that talks to the endpoint; nothing is contacted until it is used.
    """
    return OpenAICompatBackend(ref, options)
