"""Streamed generation from an OpenAI-compatible endpoint: server-sent events, timed.

A generation request is sent with ``"stream": true`` and ``"stream_options":
{"include_usage": true}``; the server answers with ``data: {chunk}`` events and a
final ``data: [DONE]``. :func:`read_stream` joins the chunks back into the answer the
non-streaming call would have given (the same text, finish reason, vLLM's
``stop_reason`` and ``usage``), so everything after it is shared with that call and
predictions cannot differ, and it reads the clock when each chunk arrives:

* **time to first token**: from sending the request to the first chunk that carries
  generated text. It includes the network and any wait in the server's queue, so
  requests in flight together (``max_concurrency``) inflate it;
* **decode span**: from that chunk to the last one that carries text or the finish
  reason. Its tokens are the server's ``usage.completion_tokens`` from the usage chunk;
  a server that sends none leaves the count unknown (chunks are not tokens: a server
  may pack several tokens in one, or send none for a token that completes no
  character), and then no decode time is recorded at all.

:func:`record_streams` hands a call's timings to
:class:`~quorumbench.evaluation.usage.BackendUsage` the way the transformers backends
report theirs: one time to first token per sequence, and as decode time the wall time
during which at least one sequence was decoding (the union of the spans), so the decode
rate is the endpoint's speed at the run's concurrency, as the transformers' is at the
run's batch size.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from quorumbench.evaluation.usage import BackendUsage

Json = dict[str, Any]
Clock = Callable[[], float]


def streaming(body: Json) -> Json:
    """``body`` asking for a stream of chunks that ends with the token counts."""
    return body | {"stream": True, "stream_options": {"include_usage": True}}


class BrokenStream(Exception):
    """The event stream failed, or ended before the answer did; worth a retry."""


@dataclass(frozen=True)
class StreamTiming:
    """When one streamed answer's chunks arrived (seconds on one monotonic clock)."""

    sent_at: float
    first_at: float | None
    """The first chunk with generated text; None when the answer has no text."""
    last_at: float | None
    """The last chunk with text or the finish reason."""
    tokens: int | None
    """Generated tokens, from the usage chunk; None when the server sent no count."""

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.sent_at

    @property
    def decode_known(self) -> bool:
        """Whether this answer's decode time and tokens are both known."""
        if self.tokens is None:
            return False
        return self.first_at is not None or self.tokens <= 1


@dataclass(frozen=True)
class Streamed:
    """A streamed answer: ``data`` as the non-streaming call answers, and its timing."""

    data: Json
    timing: StreamTiming


def is_event_stream(response: httpx.Response) -> bool:
    kind: str = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "text/event-stream"


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The data of each server-sent event; comments, ids and event names skipped."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return str(error)


def _piece(choice: Json, chat: bool) -> str:
    if chat:
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
    else:
        content = choice.get("text")
    return content if isinstance(content, str) else ""


async def read_stream(
    lines: AsyncIterator[str], *, chat: bool, sent_at: float, clock: Clock = time.perf_counter
) -> Streamed:
    """Read a chat (``chat``) or completions event stream to its end.

    Raises:
        BrokenStream: an event is not a JSON object, the server sent an ``error``
            event, or the stream ended with neither ``[DONE]`` nor a finish reason.
    """
    pieces: list[str] = []
    finish: Any = None
    stop_reason: Any = None
    usage: Json | None = None
    first_at: float | None = None
    last_at: float | None = None
    answered = done = False
    async for payload in _events(lines):
        if payload.strip() == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise BrokenStream("an event is not a JSON object")
        if chunk.get("error") is not None:
            raise BrokenStream(f"the server sent an error: {_error_text(chunk['error'])}")
        now = clock()
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one completion is asked for: index 0
            answered = True
            if piece := _piece(choice, chat):
                pieces.append(piece)
                first_at = now if first_at is None else first_at
                last_at = now
            if choice.get("finish_reason") is not None:
                finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
                last_at = now
    if not done and finish is None:
        raise BrokenStream("the stream ended before the answer did")
    choice = {"finish_reason": finish}
    if stop_reason is not None:
        choice["stop_reason"] = stop_reason
    text = "".join(pieces)
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    data: Json = {"choices": [choice] if answered else []}
    tokens = None
    if usage is not None:
        data["usage"] = usage
        count = usage.get("completion_tokens")
        tokens = count if isinstance(count, int) and count >= 0 else None
    return Streamed(data, StreamTiming(sent_at, first_at, last_at, tokens))


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """The length of the union of ``spans`` (start, end): time when any was open."""
    total = 0.0
    open_start: float | None = None
    open_end = 0.0
    for start, end in sorted(spans):
        if open_start is None or start > open_end:
            if open_start is not None:
                total += open_end - open_start
            open_start, open_end = start, end
        else:
            open_end = max(open_end, end)
    if open_start is not None:
        total += open_end - open_start
    return total


def record_streams(usage: BackendUsage, timings: Sequence[StreamTiming | None]) -> None:
    """Add one call's timings (None: an answer that was not streamed) to ``usage``.

    Every measured time to first token is added. Decode time is added only when every
    answer of the call was streamed with a token count: the decode rate divides all the
    call's generated tokens by it, so one answer without its time would inflate it."""
    for timing in timings:
        if timing is not None and (ttft := timing.ttft_s) is not None:
            usage.add_first_token(ttft)
    if not timings or not all(t is not None and t.decode_known for t in timings):
        return
    spans = [
        (t.first_at, t.last_at)
        for t in timings
        if t is not None and t.first_at is not None and t.last_at is not None
    ]
    usage.add_decode(busy_seconds(spans))
