"""Streamed generation from an OpenAI-compatible endpoint (httpx.MockTransport):
server-sent events joined into the plain answer, timed, retried, and the fallback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.openai_compat import OpenAICompatBackend
from quorumbench.backends.openai_stream import (
    BrokenStream,
    StreamTiming,
    busy_seconds,
    read_stream,
    record_streams,
)
from quorumbench.errors import EndpointError
from quorumbench.evaluation.backend import ChatMessage, GenerateRequest, Prompt
from quorumbench.evaluation.refs import parse_ref
from quorumbench.evaluation.usage import BackendUsage, recording_usage

KEY = "sk-test-SECRET-0123456789abcdef"
REF = parse_ref("openai:http://endpoint.test/v1#tiny")


class Recorder:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make_backend(handler, *, concurrency=4, retries=3, sleep=None):
    options = BackendOptions(
        api_key=SecretStr(KEY), max_concurrency=concurrency, max_retries=retries, timeout_s=5.0
    )
    return OpenAICompatBackend(
        REF,
        options,
        transport=httpx.MockTransport(handler),
        backoff_s=0.25,
        sleep=sleep or Recorder(),
    )


def body_of(request: httpx.Request) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.content)
    return body


def chat_chunks(pieces, *, finish="stop", usage=None, **extra) -> list[dict[str, Any]]:
    """Chunks as OpenAI sends them: the role first, one piece each, the finish reason,
    then (``include_usage``) a chunk with no choices and the counts."""
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    chunks += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish, **extra}]})
    if usage is not None:
        chunks.append({"choices": [], "usage": usage})
    return chunks


def text_chunks(pieces, *, finish="stop", usage=None, **extra) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "text": p, "finish_reason": None}]} for p in pieces
    ]
    chunks.append({"choices": [{"index": 0, "text": "", "finish_reason": finish, **extra}]})
    if usage is not None:
        chunks.append({"choices": [], "usage": usage})
    return chunks


def event_stream(
    chunks, *, done=True, delay=0.0, fail_after: int | None = None, status=200
) -> httpx.Response:
    """A ``text/event-stream`` answer sending ``chunks`` ``delay`` seconds apart; with
    ``fail_after``, the connection breaks after that many."""

    async def body() -> AsyncIterator[bytes]:
        for i, chunk in enumerate(chunks):
            if fail_after is not None and i == fail_after:
                raise httpx.ReadError("connection reset")
            await asyncio.sleep(delay)
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        if done:
            yield b"data: [DONE]\n\n"

    headers = {"content-type": "text/event-stream; charset=utf-8"}
    return httpx.Response(status, headers=headers, content=body())


def plain_chat(content, *, finish="stop", usage=None, **extra) -> httpx.Response:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    data: dict[str, Any] = {"choices": [{**choice, "finish_reason": finish, **extra}]}
    if usage is not None:
        data["usage"] = usage
    return httpx.Response(200, json=data)


def chat_request(content="hi", stop=(), max_new_tokens=32) -> GenerateRequest:
    prompt = Prompt(messages=(ChatMessage("user", content),))
    return GenerateRequest(prompt, stop=stop, max_new_tokens=max_new_tokens)


USAGE = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}


# -- what the backend does with a stream ----------------------------------------------


def test_a_streamed_chat_answer_is_the_plain_answer_with_timings():
    seen: list[dict[str, Any]] = []

    def handler(request):
        seen.append(body_of(request))
        if body_of(request).get("stream"):
            return event_stream(chat_chunks(["4", "2", "\nQ", "uestion:"], usage=USAGE), delay=0.01)
        return plain_chat("42\nQuestion:", usage=USAGE)

    request = chat_request("2*21?", stop=("Question:",), max_new_tokens=9)
    streamed = make_backend(handler)
    with recording_usage() as usage:
        [result] = streamed.generate([request], batch_size=1)
    assert seen[0]["stream"] is True and seen[0]["stream_options"] == {"include_usage": True}
    assert (result.text, result.n_tokens, result.finish_reason) == ("42\n", 4, "stop")
    assert usage.prompt_tokens == 11
    [ttft] = usage.ttft_s
    assert ttft >= 0.02  # the role chunk carries no text: the first piece is the second
    assert usage.decode_s is not None and usage.decode_s >= 0.02

    plain = make_backend(handler)
    plain._stream = False  # as after a refusal
    with recording_usage() as plain_usage:
        assert plain.generate([request], batch_size=1) == [result]
    assert "stream" not in seen[-1]
    assert plain_usage.ttft_s == [] and plain_usage.decode_s is None
    assert plain_usage.prompt_tokens == 11


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({}, "eos"), ({"stop_reason": "###"}, "stop"), ({"stop_reason": 2}, "eos")],
)
def test_a_streamed_completion_keeps_the_servers_stop_reason(extra, expected):
    def handler(request):
        return event_stream(text_chunks([" do", "ne"], usage=USAGE, **extra))

    request = GenerateRequest(Prompt(text="x"), stop=("###",))
    [result] = make_backend(handler).generate([request], batch_size=1)
    assert (result.text, result.finish_reason, result.n_tokens) == (" done", expected, 4)


def test_length_finish_and_more_than_four_stops_as_without_streaming():
    seen: list[dict[str, Any]] = []

    def handler(request):
        seen.append(body_of(request))
        return event_stream(text_chunks(["abc ", "END6", " more"], finish="length", usage=USAGE))

    stops = ("S1", "S2", "S3", "S4", "", "END6")
    [result] = make_backend(handler).generate(
        [GenerateRequest(Prompt(text="x"), stop=stops)], batch_size=1
    )
    assert seen[0]["stop"] == ["S1", "S2", "S3", "S4"]
    assert (result.text, result.finish_reason) == ("abc ", "stop")


def test_a_stream_without_counts_is_asked_again_plainly_and_not_streamed_again():
    seen: list[dict[str, Any]] = []

    def handler(request):
        seen.append(body_of(request))
        if body_of(request).get("stream"):  # include_usage ignored
            return event_stream(chat_chunks(["a", "b", "c"]), delay=0.005)
        return plain_chat("abc", usage=USAGE)

    backend = make_backend(handler)
    with recording_usage() as usage:
        [first] = backend.generate([chat_request()], batch_size=1)
        [second] = backend.generate([chat_request()], batch_size=1)
    assert first == second
    assert (first.text, first.n_tokens) == ("abc", 4)  # the plain answer's count
    assert [b.get("stream", False) for b in seen] == [True, False, False]
    assert len(usage.ttft_s) == 1 and usage.ttft_s[0] > 0  # the streamed request's
    assert usage.decode_s is None  # chunks are not tokens: no decode time
    assert usage.prompt_tokens == 22


def test_concurrent_requests_keep_order_and_each_has_its_own_first_token():
    in_flight = peak = 0

    async def handler(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        index = int(body_of(request)["messages"][0]["content"])
        await asyncio.sleep(0.002 * (8 - index))  # later requests answer first
        in_flight -= 1
        usage = {"prompt_tokens": 1, "completion_tokens": index + 2}
        return event_stream(chat_chunks([f"answer {index}", "!"], usage=usage), delay=0.002)

    backend = make_backend(handler, concurrency=3)
    with recording_usage() as usage:
        results = backend.generate([chat_request(str(i)) for i in range(8)], batch_size=1)
    assert [r.text for r in results] == [f"answer {i}!" for i in range(8)]
    assert [r.n_tokens for r in results] == [i + 2 for i in range(8)]
    assert 1 < peak <= 3
    assert len(usage.ttft_s) == 8 and all(t > 0 for t in usage.ttft_s)
    assert usage.prompt_tokens == 8 and usage.decode_s is not None and usage.decode_s > 0


# -- refusals, plain answers and errors ------------------------------------------------


@pytest.mark.parametrize("status", [400, 415, 422, 501])
def test_a_refused_stream_falls_back_for_good_without_timings(status):
    seen: list[dict[str, Any]] = []

    def handler(request):
        seen.append(body_of(request))
        if body_of(request).get("stream"):
            return httpx.Response(status, json={"error": {"message": "stream_options?"}})
        return plain_chat("ok", usage=USAGE)

    backend = make_backend(handler)
    with recording_usage() as usage:
        [first] = backend.generate([chat_request()], batch_size=1)
        [second] = backend.generate([chat_request()], batch_size=1)
    assert first.text == second.text == "ok"
    assert [b.get("stream", False) for b in seen] == [True, False, False]
    assert usage.ttft_s == [] and usage.decode_s is None
    assert usage.prompt_tokens == 22


def test_a_refusal_after_streams_worked_is_an_error_not_a_fallback():
    calls: list[dict[str, Any]] = []

    def handler(request):
        calls.append(body_of(request))
        if body_of(request)["messages"][0]["content"] == "bad":
            return httpx.Response(400, json={"error": {"message": "context too long"}})
        return event_stream(chat_chunks(["ok"], usage=USAGE))

    backend = make_backend(handler)
    backend.generate([chat_request()], batch_size=1)
    with pytest.raises(EndpointError, match="HTTP 400: context too long") as caught:
        backend.generate([chat_request("bad")], batch_size=1)
    assert caught.value.status == 400
    assert len(calls) == 2 and all(c["stream"] for c in calls)


def test_401_is_not_taken_for_a_refused_stream():
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        return httpx.Response(401, json={"error": {"message": f"bad key {KEY}"}})

    with pytest.raises(EndpointError) as caught:
        make_backend(handler).generate([chat_request()], batch_size=1)
    assert len(calls) == 1 and caught.value.status == 401
    assert KEY not in str(caught.value)


def test_a_plain_answer_to_a_streamed_request_stops_the_asking():
    seen: list[dict[str, Any]] = []

    def handler(request):
        seen.append(body_of(request))
        return plain_chat("plain", usage=USAGE)

    backend = make_backend(handler)
    with recording_usage() as usage:
        backend.generate([chat_request()], batch_size=1)
        [result] = backend.generate([chat_request()], batch_size=1)
    assert result.text == "plain" and result.n_tokens == 4
    assert [b.get("stream", False) for b in seen] == [True, False]
    assert usage.ttft_s == [] and usage.decode_s is None


def test_429_and_503_on_a_streamed_request_are_retried_honouring_retry_after():
    answers = [
        httpx.Response(429, headers={"Retry-After": "2"}, json={"error": {"message": "slow"}}),
        httpx.Response(503, text="overloaded"),
        event_stream(chat_chunks(["ok"], usage=USAGE)),
    ]
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        return answers[len(calls) - 1]

    sleep = Recorder()
    [result] = make_backend(handler, sleep=sleep).generate([chat_request()], batch_size=1)
    assert result.text == "ok" and len(calls) == 3
    assert sleep.waits == [2.0, 0.5]


@pytest.mark.parametrize(
    "broken",
    [
        lambda: event_stream(chat_chunks(["a", "b"], usage=USAGE), fail_after=2),
        lambda: event_stream(chat_chunks(["a", "b"])[:2], done=False),  # cut off cleanly
        lambda: event_stream([{"error": {"message": "worker died"}}]),
        lambda: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"data: {nope\n\n"
        ),
    ],
)
def test_a_stream_that_breaks_is_retried_like_a_failed_request(broken):
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            return broken()
        return event_stream(chat_chunks(["a", "b"], usage=USAGE))

    sleep = Recorder()
    with recording_usage() as usage:
        [result] = make_backend(handler, sleep=sleep).generate([chat_request()], batch_size=1)
    assert result.text == "ab" and len(calls) == 2 and sleep.waits == [0.25]
    assert len(usage.ttft_s) == 1 and usage.prompt_tokens == 11  # the retry only


def test_a_stream_that_keeps_breaking_gives_up_without_the_key():
    def handler(request):
        chunks = [{"error": {"message": f"internal: Bearer {KEY}"}}]
        return event_stream(chunks)

    with pytest.raises(EndpointError) as caught:
        make_backend(handler, retries=2).generate([chat_request()], batch_size=1)
    text = str(caught.value)
    assert "the stream broke off" in text and "gave up after 3 tries" in text
    seen: BaseException | None = caught.value
    while seen is not None:  # nor anywhere in the chain
        assert "SECRET" not in f"{seen} {seen!r}"
        seen = seen.__cause__ or seen.__context__


def test_a_failed_request_cancels_the_other_streams():
    sent: list[int] = []

    async def slow_stream() -> AsyncIterator[bytes]:
        for chunk in chat_chunks(["x"] * 200, usage=USAGE):
            await asyncio.sleep(0.01)
            sent.append(1)
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def handler(request):
        if body_of(request)["messages"][0]["content"] == "bad":
            await asyncio.sleep(0.05)  # once the other stream is flowing
            return httpx.Response(401, json={"error": {"message": "no"}})
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=slow_stream()
        )

    with pytest.raises(EndpointError, match="HTTP 401"):
        make_backend(handler).generate([chat_request("a"), chat_request("bad")], batch_size=1)
    assert 0 < len(sent) < 100  # read from, then dropped long before its end


# -- reading events and recording them -------------------------------------------------


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


def _ticks():
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    return clock


def test_read_stream_times_text_chunks_and_skips_comments_and_names():
    lines = [
        ": keep-alive",
        "",
        "event: message",
        'data: {"choices": [{"index": 0, "text": ""}]}',  # 1: no text yet
        "",
        'data: {"choices": [{"index": 0, "text": "He"}]}',  # 2: first text
        "id: 7",
        "",
        'data: {"choices": [{"index": 1, "text": "other"}]}',  # 3: not ours
        "",
        'data: {"choices": [{"index": 0, "text": "llo"}]}',  # 4
        "",
        'data: {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}',  # 5
        "",
        'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}',
        "",
        "data: [DONE]",
        "",
    ]
    streamed = asyncio.run(read_stream(_lines(*lines), chat=False, sent_at=0.5, clock=_ticks()))
    assert streamed.data == {
        "choices": [{"finish_reason": "length", "text": "Hello"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3},
    }
    assert streamed.timing == StreamTiming(sent_at=0.5, first_at=2.0, last_at=5.0, tokens=3)
    assert streamed.timing.ttft_s == 1.5


def test_read_stream_accepts_usage_on_the_finish_chunk_and_no_done():
    # llama.cpp's own server puts the counts on the last chunk.
    last = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
    chunks = [*chat_chunks(["x"])[:2], last]
    lines = [line for c in chunks for line in (f"data: {json.dumps(c)}", "")]
    streamed = asyncio.run(read_stream(_lines(*lines), chat=True, sent_at=0.0, clock=_ticks()))
    assert streamed.data["choices"][0]["message"]["content"] == "x"
    assert streamed.timing.tokens == 1 and streamed.timing.decode_known


def test_read_stream_without_choices_gives_an_answer_without_choices():
    lines = _lines("data: {}", "", "data: [DONE]")
    streamed = asyncio.run(read_stream(lines, chat=True, sent_at=0))
    assert streamed.data == {"choices": []}
    assert streamed.timing.first_at is None and streamed.timing.ttft_s is None


def test_read_stream_refuses_what_is_not_a_finished_stream():
    with pytest.raises(BrokenStream, match="ended before"):
        asyncio.run(read_stream(_lines('data: {"choices": []}'), chat=True, sent_at=0))
    with pytest.raises(BrokenStream, match="not a JSON object"):
        asyncio.run(read_stream(_lines("data: [1]"), chat=True, sent_at=0))
    with pytest.raises(BrokenStream, match="an error: boom"):
        asyncio.run(read_stream(_lines('data: {"error": "boom"}'), chat=True, sent_at=0))


def test_busy_seconds_is_the_length_of_the_union():
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 1.0)]) == 1.0
    assert busy_seconds([(2.0, 3.0), (0.0, 1.0), (0.5, 1.5)]) == pytest.approx(2.5)
    assert busy_seconds([(0.0, 4.0), (1.0, 2.0)]) == 4.0


def test_record_streams_adds_decode_only_when_every_answer_is_known():
    a = StreamTiming(0.0, 1.0, 3.0, tokens=5)
    b = StreamTiming(0.5, 2.0, 4.0, tokens=4)
    one_token = StreamTiming(0.0, None, None, tokens=1)  # e.g. only an EOS
    usage = BackendUsage()
    record_streams(usage, [a, b, one_token])
    assert usage.ttft_s == [1.0, 1.5] and usage.decode_s == 3.0

    for unknown in (None, StreamTiming(0.0, 1.0, 2.0, tokens=None), StreamTiming(0, None, None, 3)):
        usage = BackendUsage()
        record_streams(usage, [a, unknown])
        assert usage.ttft_s[0] == 1.0 and usage.decode_s is None
