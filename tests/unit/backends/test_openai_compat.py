"""The OpenAI-compatible backend against scripted endpoints (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
import traceback
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.backends.openai_compat import (
    OpenAICompatBackend,
    continuation_logprob,
    letter_prompt,
    parse_letter,
    retry_after_seconds,
    sanitize,
)
from quorumbench.errors import BackendError, EndpointError, InvalidRefError
from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceRequest,
    GenerateRequest,
    ModelBackend,
    Prompt,
)
from quorumbench.evaluation.refs import parse_ref

KEY = "sk-test-SECRET-0123456789abcdef"
BASE = "http://endpoint.test/v1"
REF = parse_ref(f"openai:{BASE}#tiny")


class Recorder:
    """Sleeps nowhere; remembers how long the backend asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make_backend(handler, *, concurrency=4, retries=3, sleep=None, **kwargs):
    options = BackendOptions(
        api_key=SecretStr(KEY), max_concurrency=concurrency, max_retries=retries, timeout_s=5.0
    )
    return OpenAICompatBackend(
        REF,
        options,
        transport=httpx.MockTransport(handler),
        backoff_s=0.25,
        max_backoff_s=1.0,
        sleep=sleep or Recorder(),
        **kwargs,
    )


def body_of(request: httpx.Request) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.content)
    return body


def chat_answer(content, *, finish="stop", tokens=None, **extra):
    data: dict[str, Any] = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
                **extra,
            }
        ]
    }
    if tokens is not None:
        data["usage"] = {"completion_tokens": tokens}
    return httpx.Response(200, json=data)


def text_answer(text, *, finish="stop", tokens=None, **extra):
    data: dict[str, Any] = {
        "choices": [{"index": 0, "text": text, "finish_reason": finish, **extra}]
    }
    if tokens is not None:
        data["usage"] = {"completion_tokens": tokens}
    return httpx.Response(200, json=data)


def chat_request(content="hi", stop=(), max_new_tokens=32):
    prompt = Prompt(messages=(ChatMessage("user", content),))
    return GenerateRequest(prompt, stop=stop, max_new_tokens=max_new_tokens)


def error_chain_text(error: BaseException) -> str:
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    parts.append("".join(traceback.format_exception(error)))
    return "\n".join(parts)


# -- generation -------------------------------------------------------------------


def test_chat_generation_posts_messages_and_cuts_at_the_stop_sequence():
    seen: list[Any] = []

    def handler(request):
        seen.append(request)
        return chat_answer("42\nQuestion: next one", finish="stop", tokens=7)

    backend = make_backend(handler)
    [result] = backend.generate(
        [chat_request("2*21?", stop=("Question:",), max_new_tokens=9)], batch_size=1
    )
    assert (result.text, result.n_tokens, result.finish_reason) == ("42\n", 7, "stop")
    [request] = seen
    assert request.method == "POST" and request.url == f"{BASE}/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert body_of(request) == {
        "model": "tiny",
        "temperature": 0,
        "max_tokens": 9,
        "stop": ["Question:"],
        "messages": [{"role": "user", "content": "2*21?"}],
        "stream": True,  # the answer above is a plain document: no second request
        "stream_options": {"include_usage": True},
    }


def test_text_generation_uses_completions_and_reports_length():
    seen: list[Any] = []

    def handler(request):
        seen.append(request)
        return text_answer(" and so on", finish="length")

    backend = make_backend(handler)
    request = GenerateRequest(Prompt(text="Once upon a time"), max_new_tokens=4)
    [result] = backend.generate([request], batch_size=1)
    assert (result.text, result.n_tokens, result.finish_reason) == (" and so on", 0, "length")
    assert seen[0].url == f"{BASE}/completions"
    assert body_of(seen[0]) == {
        "model": "tiny",
        "temperature": 0,
        "max_tokens": 4,
        "prompt": "Once upon a time",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_only_four_stops_are_sent_and_the_rest_are_applied_locally():
    seen: list[Any] = []

    def handler(request):
        seen.append(body_of(request))
        return text_answer("abc END6 more", finish="length", tokens=5)

    stops = ("S1", "S2", "S3", "S4", "", "END6")
    backend = make_backend(handler)
    [result] = backend.generate([GenerateRequest(Prompt(text="x"), stop=stops)], batch_size=1)
    assert seen[0]["stop"] == ["S1", "S2", "S3", "S4"]
    assert (result.text, result.finish_reason) == ("abc ", "stop")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({}, "eos"), ({"stop_reason": "###"}, "stop"), ({"stop_reason": 2}, "eos")],
)
def test_finish_reason_when_the_server_applied_the_stop(extra, expected):
    backend = make_backend(lambda request: chat_answer("done", **extra))
    [result] = backend.generate([chat_request(stop=("###",))], batch_size=1)
    assert (result.text, result.finish_reason) == ("done", expected)


def test_results_keep_request_order_and_concurrency_stays_bounded():
    in_flight = 0
    peak = 0

    async def handler(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        index = int(body_of(request)["messages"][0]["content"])
        await asyncio.sleep(0.002 * (8 - index))  # later requests finish first
        in_flight -= 1
        return chat_answer(f"answer {index}", tokens=index)

    progress: list[int] = []
    backend = make_backend(handler, concurrency=3)
    requests = [chat_request(str(i)) for i in range(8)]
    results = backend.generate(requests, batch_size=2, progress=progress.append)
    assert [r.text for r in results] == [f"answer {i}" for i in range(8)]
    assert [r.n_tokens for r in results] == list(range(8))
    assert progress == [1] * 8
    assert 1 < peak <= 3


def test_no_requests_means_no_calls():
    def handler(request):
        raise AssertionError("no call expected")

    backend = make_backend(handler)
    assert backend.generate([], batch_size=1) == []
    assert backend.choose([], batch_size=1) == []


def test_a_running_event_loop_does_not_get_in_the_way():
    backend = make_backend(lambda request: chat_answer("fine"))

    async def from_async_code():
        return backend.generate([chat_request()], batch_size=1)

    [result] = asyncio.run(from_async_code())
    assert result.text == "fine"


# -- retries and errors -----------------------------------------------------------


def test_429_and_503_are_retried_honouring_retry_after():
    answers = [
        httpx.Response(429, headers={"Retry-After": "2"}, json={"error": {"message": "slow"}}),
        httpx.Response(503, text="overloaded"),
        chat_answer("ok"),
    ]
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        return answers[len(calls) - 1]

    sleep = Recorder()
    [result] = make_backend(handler, sleep=sleep).generate([chat_request()], batch_size=1)
    assert result.text == "ok"
    assert len(calls) == 3
    assert sleep.waits == [2.0, 0.5]  # Retry-After, then backoff 0.25 * 2 ** 1


def test_connection_errors_and_timeouts_are_retried():
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            raise httpx.ReadTimeout("slow", request=request)
        return chat_answer("ok")

    sleep = Recorder()
    [result] = make_backend(handler, sleep=sleep).generate([chat_request()], batch_size=1)
    assert result.text == "ok"
    assert sleep.waits == [0.25, 0.5]


def test_backoff_is_capped():
    sleep = Recorder()
    backend = make_backend(lambda request: httpx.Response(502), retries=5, sleep=sleep)
    with pytest.raises(EndpointError, match=r"HTTP 502.*gave up after 6 tries"):
        backend.generate([chat_request()], batch_size=1)
    assert sleep.waits == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_zero_retries_means_one_attempt():
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    backend = make_backend(handler, retries=0)
    with pytest.raises(EndpointError, match="ConnectError"):
        backend.generate([chat_request()], batch_size=1)
    assert len(calls) == 1


def test_401_fails_at_once_without_revealing_the_key():
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        message = f"Incorrect API key provided: {KEY}. Header was Bearer {KEY}"
        return httpx.Response(401, json={"error": {"message": message}})

    backend = make_backend(handler)
    with pytest.raises(EndpointError) as caught:
        backend.generate([chat_request()], batch_size=1)
    assert len(calls) == 1
    error = caught.value
    assert isinstance(error, EndpointError) and error.status == 401
    assert error.code == "endpoint-error"
    assert "HTTP 401" in str(error) and "Incorrect API key" in str(error)
    assert KEY not in error_chain_text(error)
    assert "SECRET" not in error_chain_text(error)


def test_transport_errors_do_not_carry_the_key():
    def handler(request):
        raise httpx.ConnectError(f"refused {request.headers['authorization']}", request=request)

    backend = make_backend(handler, retries=1)
    with pytest.raises(EndpointError) as caught:
        backend.generate([chat_request()], batch_size=1)
    assert KEY not in error_chain_text(caught.value)


def test_a_failed_request_fails_the_call():
    def handler(request):
        if body_of(request)["messages"][0]["content"] == "bad":
            return httpx.Response(400, json={"error": {"message": "context too long"}})
        return chat_answer("ok")

    backend = make_backend(handler)
    with pytest.raises(EndpointError, match="context too long"):
        backend.generate([chat_request("a"), chat_request("bad"), chat_request("b")], batch_size=1)


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>"),
        httpx.Response(200, json=[1]),
        httpx.Response(200, json={"choices": []}),
    ],
)
def test_malformed_answers_are_endpoint_errors(response):
    backend = make_backend(lambda request: response)
    with pytest.raises(EndpointError):
        backend.generate([chat_request()], batch_size=1)


def test_the_key_stays_out_of_reprs():
    options = BackendOptions(api_key=SecretStr(KEY))
    backend = OpenAICompatBackend(REF, options)
    for text in (repr(backend), str(backend), repr(options), str(vars(backend))):
        assert KEY not in text


def test_sanitize_masks_keys_and_shortens():
    text = sanitize(f"bad key {KEY} (Bearer abc.def) sk-other-key-xyz\n\x00" + "x" * 500, KEY)
    assert KEY not in text and "abc.def" not in text and "sk-other" not in text
    assert "\n" not in text and "\x00" not in text
    assert len(text) <= 200


def test_retry_after_forms():
    assert retry_after_seconds(httpx.Headers({"retry-after": "3"})) == 3.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "1500"})) == 1.5
    assert retry_after_seconds(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers()) is None


def test_a_closed_backend_refuses_work():
    backend = make_backend(lambda request: chat_answer("ok"))
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.generate([chat_request()], batch_size=1)


# -- multiple choice ----------------------------------------------------------------

CONTEXT = "Q: x\nA:"


def echo_logprobs(prompt: str, pieces: list[tuple[str, float | None]], generated=()):
    """A completions answer echoing ``pieces`` (which must spell ``prompt``)."""
    assert "".join(p for p, _ in pieces) == prompt
    tokens, values, offsets = [], [], []
    offset = 0
    for piece, value in [*pieces, *generated]:
        tokens.append(piece)
        values.append(value)
        offsets.append(offset)
        offset += len(piece)
    logprobs = {
        "tokens": tokens,
        "token_logprobs": values,
        "text_offset": offsets,
        "top_logprobs": None,
    }
    text = prompt + "".join(p for p, _ in generated)
    return httpx.Response(200, json={"choices": [{"text": text, "logprobs": logprobs}]})


CONTEXT_PIECES = [("Q", None), (":", -1.0), (" x", -2.0), ("\n", -0.5), ("A", -0.25), (":", -0.1)]
OPTION_PIECES = {
    " yes": [(" yes", -1.5)],
    " no way": [(" no", -0.7), (" way", -0.2)],
    " maybe": [(" may", -3.0), ("be", -0.125)],
}


def scoring_handler(seen, generated=()):
    def handler(request):
        body = body_of(request)
        seen.append(body)
        option = body["prompt"][len(CONTEXT) :]
        pieces = CONTEXT_PIECES + OPTION_PIECES[option]
        return echo_logprobs(body["prompt"], pieces, generated)

    return handler


def choice_request(options=(" yes", " no way", " maybe")):
    plain = tuple(o.strip() for o in options)
    return ChoiceRequest(CONTEXT, tuple(options), "x?", plain, tuple(range(len(options))))


def test_loglikelihoods_sum_the_continuation_tokens():
    seen: list[Any] = []
    backend = make_backend(scoring_handler(seen))
    progress: list[int] = []
    [result] = backend.choose([choice_request()], batch_size=4, progress=progress.append)
    assert result.method == "loglikelihood"
    assert result.loglikelihoods == pytest.approx((-1.5, -0.9, -3.125))
    assert result.n_tokens == 1 + 2 + 2
    assert progress == [1]
    assert sorted(b["prompt"] for b in seen) == sorted(CONTEXT + o for o in OPTION_PIECES)
    for body in seen:
        assert body | {"prompt": None} == {
            "model": "tiny",
            "prompt": None,
            "echo": True,
            "max_tokens": 1,  # not 0: llama.cpp reads 0 as "no limit"
            "logprobs": 1,
            "temperature": 0,
        }


def test_tokens_generated_after_the_prompt_are_ignored():
    seen: list[Any] = []
    backend = make_backend(scoring_handler(seen, generated=[(" extra", -9.0)]))
    [result] = backend.choose([choice_request()], batch_size=1)
    assert result.loglikelihoods == pytest.approx((-1.5, -0.9, -3.125))


def test_a_token_spanning_the_boundary_counts_for_the_continuation():
    logprobs = {"tokens": ["ab", "cd"], "token_logprobs": [None, -2.0], "text_offset": [0, 2]}
    # context "abc", continuation "d": the token "cd" covers the continuation
    assert continuation_logprob(logprobs, 3, 4) == (-2.0, 1)


@pytest.mark.parametrize(
    "logprobs",
    [
        {"tokens": ["a"], "token_logprobs": [None, -1.0], "text_offset": [0]},
        {"tokens": ["ab", "c"], "token_logprobs": [None, -1.0], "text_offset": [3, 5]},
        {"tokens": ["ab"], "token_logprobs": [None], "text_offset": [0]},
        {"tokens": [], "token_logprobs": [], "text_offset": []},
    ],
    ids=["ragged", "not-echoed", "nothing-after-context", "empty"],
)
def test_answers_without_usable_prompt_logprobs_count_as_unsupported(logprobs):
    with pytest.raises(Exception) as caught:
        continuation_logprob(logprobs, 2, 3)
    assert type(caught.value).__name__ == "EchoUnsupported"


def test_an_option_at_the_start_of_the_prompt_cannot_be_scored():
    logprobs = {"tokens": ["yes"], "token_logprobs": [None], "text_offset": [0]}
    with pytest.raises(EndpointError, match="first option token"):
        continuation_logprob(logprobs, 0, 3)


def test_only_openai_refs_are_accepted():
    with pytest.raises(InvalidRefError):
        OpenAICompatBackend(parse_ref("hf:./model"), BackendOptions())


def test_one_new_token_is_asked_for_and_ignored_on_every_request():
    # llama.cpp's server reads max_tokens 0 as "generate to the end of the context";
    # the one token it generates after the echoed prompt must not count.
    seen: list[Any] = []
    backend = make_backend(scoring_handler(seen, generated=[(" gen", -4.0)]))
    results = backend.choose([choice_request(), choice_request()], batch_size=1)
    assert [r.loglikelihoods for r in results] == [pytest.approx((-1.5, -0.9, -3.125))] * 2
    assert [r.n_tokens for r in results] == [5, 5]
    assert {b["max_tokens"] for b in seen} == {1}


def letter_handler(calls, completions_answer, reply="B"):
    def handler(request):
        calls.append(request.url.path)
        if request.url.path.endswith("/completions") and "chat" not in request.url.path:
            return completions_answer(request)
        return chat_answer(reply, tokens=1)

    return handler


@pytest.mark.parametrize(
    "completions_answer",
    [
        lambda r: httpx.Response(404, json={"detail": "Not Found"}),
        lambda r: httpx.Response(400, json={"error": {"message": "echo is not supported"}}),
        lambda r: httpx.Response(422, json={"error": {"message": "logprobs: not allowed"}}),
        lambda r: text_answer("whatever"),
        lambda r: httpx.Response(
            200, json={"choices": [{"text": "x", "logprobs": {"tokens": []}}]}
        ),
    ],
    ids=["404", "400-echo", "422-logprobs", "no-logprobs", "no-offsets"],
)
def test_falls_back_to_letter_choice_once_and_remembers(completions_answer):
    calls: list[Any] = []
    backend = make_backend(letter_handler(calls, completions_answer), concurrency=1)
    request = choice_request()
    [first] = backend.choose([request], batch_size=1)
    assert (first.method, first.chosen, first.raw_text, first.n_tokens) == ("letter", 1, "B", 1)
    assert backend.uses_letters
    calls.clear()
    [second] = backend.choose([request], batch_size=1)
    assert second.method == "letter"
    assert calls == ["/v1/chat/completions"]


def test_other_client_errors_do_not_trigger_the_fallback():
    def handler(request):
        return httpx.Response(400, json={"error": {"message": "model 'tiny' does not exist"}})

    backend = make_backend(handler)
    with pytest.raises(EndpointError, match="does not exist"):
        backend.choose([choice_request()], batch_size=1)
    assert not backend.uses_letters


def test_letter_prompt_shows_options_in_letter_order_and_maps_back():
    seen: list[Any] = []

    def handler(request):
        if "chat" not in request.url.path:
            return httpx.Response(404)
        seen.append(body_of(request))
        return chat_answer("The answer is C.")

    request = ChoiceRequest(
        "ctx", (" red", " green", " blue"), "Which colour?", ("red", "green", "blue"), (2, 0, 1)
    )
    [result] = make_backend(handler).choose([request], batch_size=1)
    prompt = seen[0]["messages"][0]["content"]
    assert prompt.endswith("Question: Which colour?\nA. blue\nB. red\nC. green\n\nAnswer:")
    assert prompt == letter_prompt(request)
    assert seen[0]["temperature"] == 0 and seen[0]["model"] == "tiny"
    assert (result.method, result.chosen, result.raw_text) == ("letter", 1, "The answer is C.")


def test_an_unparseable_letter_reply_chooses_nothing():
    def handler(request):
        if "chat" not in request.url.path:
            return httpx.Response(404)
        return chat_answer("I don't know")

    [result] = make_backend(handler).choose([choice_request()], batch_size=1)
    assert (result.method, result.chosen, result.raw_text) == ("letter", None, "I don't know")


@pytest.mark.parametrize(
    ("reply", "n", "expected"),
    [
        ("A", 3, 0),
        (" C.", 3, 2),
        ("(B) red", 3, 1),
        ("Answer: C", 3, 2),
        ("D or B", 3, 1),
        ("I think B", 4, 1),
        ("b", 3, None),
        ("BC", 3, None),
        ("", 3, None),
        ("E", 4, None),
    ],
)
def test_parse_letter(reply, n, expected):
    assert parse_letter(reply, n) == expected


# -- info and the rest ------------------------------------------------------------


def test_info_uses_the_models_listing():
    calls: list[Any] = []

    def handler(request):
        calls.append(request.url.path)
        assert request.method == "GET"
        entries = [{"id": "other"}, {"id": "tiny", "root": "org/tiny-1b", "owned_by": "vllm"}]
        return httpx.Response(200, json={"object": "list", "data": entries})

    backend = make_backend(handler)
    info = backend.info
    assert backend.info is info and calls == ["/v1/models"]
    assert info.ref == f"openai:{BASE}#tiny"
    assert (info.backend, info.revision, info.is_chat, info.device) == (
        "openai-compat",
        "tiny@org/tiny-1b",
        True,
        "remote",
    )
    assert info.details["owned_by"] == "vllm"


@pytest.mark.parametrize(
    "answer",
    [
        lambda request: httpx.Response(404),
        lambda request: httpx.Response(200, json={"data": "nope"}),
        lambda request: (_ for _ in ()).throw(httpx.ConnectError("down", request=request)),
    ],
)
def test_info_survives_a_missing_models_endpoint(answer):
    info = make_backend(answer).info
    assert info.revision == "tiny"
    assert info.details == {"endpoint_models": "unavailable"}


def test_count_tokens_is_an_estimate():
    backend = make_backend(lambda request: httpx.Response(500))
    assert backend.count_tokens("") == 0
    assert backend.count_tokens("x" * 40) == 10


def test_registered_as_the_openai_compat_backend():
    backend = load_backend(f"openai:{BASE}#tiny", BackendOptions(api_key=SecretStr(KEY)))
    assert isinstance(backend, OpenAICompatBackend)
    assert isinstance(backend, ModelBackend)
    backend.close()


# -- redirects, URLs, errors that must not carry the key -----------------------------


def test_a_redirect_is_an_error_naming_where_it_pointed():
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        return httpx.Response(302, headers={"location": "http://169.254.169.254/x?k=v"})

    with pytest.raises(EndpointError) as caught:
        make_backend(handler).generate([chat_request()], batch_size=1)
    message = caught.value.message
    assert "redirected (HTTP 302) to http://169.254.169.254/x;" in message
    assert "redirects are not followed" in message
    assert caught.value.status == 302 and len(calls) == 1


@pytest.mark.parametrize(
    "failure",
    [httpx.UnsupportedProtocol, httpx.DecodingError, httpx.LocalProtocolError],
)
def test_other_httpx_errors_fail_at_once_without_the_key(failure):
    calls: list[Any] = []

    def handler(request):
        calls.append(request)
        raise failure(f"broken {request.headers['authorization']}", request=request)

    with pytest.raises(EndpointError) as caught:
        make_backend(handler).generate([chat_request()], batch_size=1)
    assert failure.__name__ in caught.value.message and len(calls) == 1
    assert KEY not in error_chain_text(caught.value)
    assert "SECRET" not in error_chain_text(caught.value)


def test_the_pinned_transport_refuses_a_loopback_endpoint_without_the_key():
    from quorumbench.errors import EndpointNotAllowedError
    from quorumbench.evaluation.endpoints import pinned_transport

    ref = parse_ref("openai:http://local.example:8000/v1#tiny")
    backend = OpenAICompatBackend(
        ref,
        BackendOptions(api_key=SecretStr(KEY), max_retries=2),
        transport=pinned_transport(allow_private=False, resolve=lambda host, port: ["127.0.0.1"]),
    )
    with pytest.raises(EndpointNotAllowedError) as caught:
        backend.generate([chat_request()], batch_size=1)
    assert "local.example resolves to 127.0.0.1, a loopback address" in caught.value.message
    assert KEY not in error_chain_text(caught.value)


def test_repr_and_info_never_show_the_key():
    backend = make_backend(lambda request: httpx.Response(404))
    assert KEY not in repr(backend)
    assert KEY not in repr(backend.info)
    assert "SECRET" not in repr(BackendOptions(api_key=SecretStr(KEY)))


# -- llama-cpp-python's misaligned echo ------------------------------------------------


def llamacpp_like_handler(seen):
    """Answers as llama-cpp-python 0.3 does for a model without a BOS token: the text
    holds the generated token, the log-probabilities stop at the prompt's end."""

    def handler(request):
        seen.append(request.url.path)
        if request.url.path.endswith("/chat/completions"):
            return chat_answer("C", tokens=1)
        body = body_of(request)
        option = body["prompt"][len(CONTEXT) :]
        pieces = CONTEXT_PIECES + OPTION_PIECES[option]
        answer = echo_logprobs(body["prompt"], pieces)
        data = answer.json()
        data["choices"][0]["text"] += "."  # generated, but no log-probability for it
        return httpx.Response(200, json=data)

    return handler


def test_echoed_logprobs_missing_the_generated_token_fall_back_to_letters():
    seen: list[str] = []
    backend = make_backend(llamacpp_like_handler(seen))
    results = backend.choose([choice_request(), choice_request(), choice_request()], batch_size=4)
    assert backend.uses_letters
    assert [r.method for r in results] == ["letter"] * 3
    assert [r.chosen for r in results] == [2, 2, 2]
    # The first request alone found out (its options, then its letter prompt); the
    # others went by letter at once, so no run mixes the two methods.
    assert seen.count("/v1/completions") <= len(OPTION_PIECES)
    assert seen.count("/v1/chat/completions") == 3


def test_the_first_request_decides_before_the_others_start():
    seen: list[Any] = []
    backend = make_backend(scoring_handler(seen, generated=[(".", -0.3)]), concurrency=8)
    results = backend.choose([choice_request()] * 4, batch_size=4)
    assert {r.method for r in results} == {"loglikelihood"} and not backend.uses_letters
    assert len(seen) == 4 * len(OPTION_PIECES)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Q: x", [("Q", None), (": x", -1.0)]),  # nothing generated (end of text)
        ("Q: x!", [("Q", None), (": x", -1.0), ("!", -0.1)]),  # generated and covered
        ("other text", [("Q", None), (": x", -1.0)]),  # a text we cannot line up
    ],
)
def test_aligned_or_unknowable_echoes_pass(text, pieces):
    from quorumbench.backends.openai_compat import check_echo_alignment

    offsets = [0]
    for piece, _ in pieces[:-1]:
        offsets.append(offsets[-1] + len(piece))
    logprobs = {"tokens": [p for p, _ in pieces], "text_offset": offsets}
    check_echo_alignment({"text": text, "logprobs": logprobs}, "Q: x")
    check_echo_alignment({"text": text}, "Q: x")
    check_echo_alignment({"text": text, "logprobs": {"tokens": []}}, "Q: x")


def test_a_misaligned_echo_is_named_in_the_reason():
    from quorumbench.backends.openai_compat import check_echo_alignment

    logprobs = {"tokens": ["Q", ": x"], "text_offset": [0, 1]}
    with pytest.raises(Exception, match="misaligned by one position") as caught:
        check_echo_alignment({"text": "Q: x.", "logprobs": logprobs}, "Q: x")
    assert type(caught.value).__name__ == "EchoUnsupported"
