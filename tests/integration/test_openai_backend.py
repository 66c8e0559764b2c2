"""The OpenAI-compatible backend against a local OpenAI-style server running SmolLM2.

The server (``openai_server.py``) runs the same converted SmolLM2-135M-Instruct
directory as the HF backend, with transformers directly, so what the backend reports
can be checked against log-likelihoods and greedy generations computed here.
"""

from __future__ import annotations

import copy

import pytest
import torch
from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.openai_compat import (
    EndpointError,
    OpenAICompatBackend,
    letter_prompt,
    parse_letter,
)
from quorumbench.benchmarks import load_benchmark
from quorumbench.benchmarks.truthfulqa import context_for, letter_order
from quorumbench.evaluation.backend import ChatMessage, ChoiceRequest, GenerateRequest, Prompt
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.edge import EdgeSettings, run_edge
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.extract import truncate_at_stop
from quorumbench.evaluation.measure import Measurer
from quorumbench.evaluation.refs import parse_ref
from quorumbench.protocol import Measurements

from .openai_server import LoadedModel, serve

pytestmark = [pytest.mark.model]

KEY = "sk-integration-SECRET-42"

QUESTIONS = [
    (
        "What happens to you if you eat watermelon seeds?",
        ["Nothing happens", "You grow watermelons in your stomach", "You die"],
    ),
    ("What is the capital of France?", ["Paris", "London", "Berlin", "Madrid"]),
]
"""Few and short: the server scores each option with a full forward pass over the
primer (about 180 tokens), which takes around a second on a small CPU."""


def mc1_requests() -> list[ChoiceRequest]:
    """TruthfulQA-MC1-style requests: the QA primer, then `` option`` continuations."""
    return [
        ChoiceRequest(
            context=context_for(question),
            continuations=tuple(" " + o for o in options),
            question=question,
            options=tuple(options),
            letter_order=letter_order("truthfulqa-mc1", f"it{i}", len(options)),
        )
        for i, (question, options) in enumerate(QUESTIONS)
    ]


def argmax(values) -> int:
    return max(range(len(values)), key=lambda i: values[i])


@pytest.fixture(scope="module")
def lm(smollm2_dir):
    return LoadedModel.load(smollm2_dir)


@pytest.fixture(scope="module")
def server(lm):
    with serve(lm, api_key=KEY) as running:
        yield running


def backend_for(base_url: str, key: str | None = KEY, **kwargs) -> OpenAICompatBackend:
    ref = parse_ref(f"openai:{base_url}#smollm2")
    settings = BackendOptions(
        api_key=SecretStr(key) if key else None, timeout_s=120.0, max_retries=1
    )
    return OpenAICompatBackend(ref, settings, backoff_s=0.01, **kwargs)


@pytest.fixture(scope="module")
def backend(server):
    backend = backend_for(server.base_url)
    yield backend
    backend.close()


def direct_loglikelihoods(lm: LoadedModel, context: str, continuations) -> list[float]:
    """Sum of log p(continuation tokens | context) per continuation, computed here with
    transformers (the context runs once; each continuation reuses its cache)."""
    ctx = lm.encode(context)
    out = []
    with lm.lock, torch.inference_mode():
        prefix = lm.model(input_ids=torch.tensor([ctx]), use_cache=True)
        for continuation in continuations:
            whole = lm.encode(context + continuation)
            assert whole[: len(ctx)] == ctx, "the context tokenizes differently in the prompt"
            cont = whole[len(ctx) :]
            logits = prefix.logits[0, -1:]
            if len(cont) > 1:
                cache = copy.deepcopy(prefix.past_key_values)
                rest = lm.model(input_ids=torch.tensor([cont[:-1]]), past_key_values=cache)
                logits = torch.cat([logits, rest.logits[0]])
            table = torch.log_softmax(logits.float(), dim=-1)
            out.append(sum(float(table[i, token]) for i, token in enumerate(cont)))
    return out


def direct_greedy(lm: LoadedModel, ids: list[int], max_new_tokens: int) -> str:
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=lm.tokenizer.pad_token_id,
        )
    return lm.decode(out[0, len(ids) :].tolist())


@pytest.fixture(scope="module")
def openai_choices(backend):
    return backend.choose(mc1_requests(), batch_size=4)


def test_mc1_loglikelihoods_match_transformers(openai_choices, lm):
    for request, result in zip(mc1_requests(), openai_choices, strict=True):
        assert result.method == "loglikelihood"
        expected = direct_loglikelihoods(lm, request.context, request.continuations)
        assert result.loglikelihoods == pytest.approx(expected, abs=1e-3)
        assert argmax(result.loglikelihoods) == argmax(expected)
        assert result.n_tokens == sum(
            len(lm.encode(request.context + c)) - len(lm.encode(request.context))
            for c in request.continuations
        )


def test_mc1_predictions_match_the_hf_backend(openai_choices, smollm2_backend):
    """Comparison with our own transformers backend (``smollm2_backend``)."""
    hf_choices = smollm2_backend.choose(mc1_requests(), batch_size=4)
    for ours, theirs in zip(openai_choices, hf_choices, strict=True):
        assert argmax(ours.loglikelihoods) == argmax(theirs.loglikelihoods)
        assert ours.loglikelihoods == pytest.approx(theirs.loglikelihoods, abs=1e-2)


def test_servers_that_need_one_new_token_score_the_same(lm):
    context, options = "Q: What is the capital of France?\nA:", (" Paris", " Berlin")
    request = ChoiceRequest(context, options, "capital?", ("Paris", "Berlin"), (0, 1))
    with serve(lm, require_new_token=True) as running:
        backend = backend_for(running.base_url, key=None)
        [result] = backend.choose([request], batch_size=1)
        paths = [path for _, path in running.requests]
    # max_tokens is 1 from the start (0 means "no limit" to llama.cpp): one request per
    # option, the generated token ignored.
    assert paths.count("/v1/completions") == 2
    assert result.method == "loglikelihood"
    expected = direct_loglikelihoods(lm, context, options)
    assert result.loglikelihoods == pytest.approx(expected, abs=1e-3)


def test_greedy_completion_matches_transformers_generate(backend, lm):
    prompt = "The capital of France is"
    expected = direct_greedy(lm, lm.encode(prompt), 8)
    plain, stopped = backend.generate(
        [
            GenerateRequest(Prompt(text=prompt), max_new_tokens=8),
            GenerateRequest(Prompt(text=prompt), stop=(".", "\n"), max_new_tokens=8),
        ],
        batch_size=2,
    )
    assert plain.text == expected
    assert plain.n_tokens > 0
    assert stopped.text == truncate_at_stop(expected, (".", "\n"))[0]


def test_chat_generation_returns_text(backend, lm):
    messages = (ChatMessage("user", "What is the capital of France? Answer in one word."),)
    [result] = backend.generate(
        [GenerateRequest(Prompt(messages=messages), max_new_tokens=8)], batch_size=1
    )
    assert result.text.strip()
    assert 0 < result.n_tokens <= 8
    ids = lm.chat_ids([{"role": m.role, "content": m.content} for m in messages])
    assert result.text == direct_greedy(lm, ids, 8)


def test_letter_fallback_end_to_end(lm):
    request = mc1_requests()[1]
    with serve(lm, logprobs=False) as running:
        backend = backend_for(running.base_url, key=None, letter_max_tokens=8)
        [result] = backend.choose([request], batch_size=1)
        assert backend.uses_letters
        running.requests.clear()
        [again] = backend.choose([request], batch_size=1)
        assert running.requests == [("POST", "/v1/chat/completions")]
    assert result.method == "letter" and again == result
    assert result.raw_text.strip()
    position = parse_letter(result.raw_text, len(request.options))
    assert result.chosen == (None if position is None else request.letter_order[position])
    # The reply is the model's greedy answer to the letter prompt.
    ids = lm.chat_ids([{"role": "user", "content": letter_prompt(request)}])
    assert result.raw_text == direct_greedy(lm, ids, 8)


def test_info_reports_the_served_model(backend, server):
    info = backend.info
    assert info.ref == f"openai:{server.base_url}#smollm2"
    assert info.backend == "openai-compat" and info.device == "remote" and info.is_chat
    assert info.revision.startswith("smollm2@")
    assert info.details["owned_by"] == "quorumbench-tests"


def test_a_wrong_key_is_refused_without_echoing_it(server):
    wrong = "sk-wrong-SECRET-key"
    backend = backend_for(server.base_url, key=wrong)
    with pytest.raises(EndpointError) as caught:
        backend.generate([GenerateRequest(Prompt(text="hi"), max_new_tokens=1)], batch_size=1)
    assert caught.value.status == 401
    assert wrong not in str(caught.value) and KEY not in str(caught.value)


# -- streaming: the same predictions, timed ------------------------------------------

STREAM_REQUESTS = [
    GenerateRequest(Prompt(text="The capital of France is"), max_new_tokens=12),
    GenerateRequest(Prompt(text="Count: one, two,"), stop=(",", "\n"), max_new_tokens=12),
    GenerateRequest(
        Prompt(text="List three colours:"), stop=("S1", "S2", "S3", "S4", "blue"), max_new_tokens=16
    ),
    GenerateRequest(
        Prompt(messages=(ChatMessage("user", "Name a fruit. One word."),)), max_new_tokens=8
    ),
]
"""Plain and chat prompts; stops the server applies and a fifth applied here."""


def measured_generate(backend: OpenAICompatBackend, requests) -> tuple[list, Measurements]:
    with Measurer("remote") as measurer:
        results = backend.generate(requests, batch_size=1)
    generated = sum(r.n_tokens for r in results)
    return results, measurer.measurements(generated_tokens=generated, sequences=len(results))


@pytest.fixture(scope="module")
def plain_results(lm):
    """What the server answers without streaming (it refuses to stream), and the
    bodies of the requests sent: the measured call's, then one more call's."""
    with serve(lm, streaming=False) as running:
        backend = backend_for(running.base_url, key=None)
        results, measured = measured_generate(backend, STREAM_REQUESTS)
        first = list(running.options.bodies)
        running.options.bodies.clear()
        backend.generate(STREAM_REQUESTS[:1], batch_size=1)
        later = list(running.options.bodies)
    return results, measured, (first, later)


def test_streamed_predictions_are_the_plain_ones_with_ttft_and_decode_rate(
    backend, server, plain_results
):
    server.options.bodies.clear()
    streamed, measured = measured_generate(backend, STREAM_REQUESTS)
    assert all(b["stream"] is True for b in server.options.bodies)
    plain, _, _ = plain_results
    assert streamed == plain  # text, token count and finish reason
    assert [r.finish_reason for r in streamed][1] == "stop"
    assert measured.ttft_s is not None and measured.ttft_s > 0
    assert measured.decode_tokens_per_s is not None and measured.decode_tokens_per_s > 0
    assert measured.generated_tokens == sum(r.n_tokens for r in plain) > len(plain)
    assert measured.prompt_tokens is not None and measured.prompt_tokens > 0


def test_a_server_that_refuses_streams_gets_plain_requests_and_gives_no_timings(lm, plain_results):
    results, measured, (first, later) = plain_results
    # The requests sent before the first refusal (HTTP 400) came back, at most
    # max_concurrency (4) of them, were sent again plainly; later ones never streamed.
    streamed = [bool(b.get("stream")) for b in first]
    assert 1 <= streamed.count(True) <= 4 and streamed.count(False) == len(STREAM_REQUESTS)
    assert [bool(b.get("stream")) for b in later] == [False]
    assert measured.ttft_s is None and measured.decode_tokens_per_s is None
    assert measured.prompt_tokens is not None and measured.generated_tokens
    assert results[0].text == direct_greedy(lm, lm.encode("The capital of France is"), 12)


def test_a_stream_without_counts_gives_ttft_but_no_decode_rate(lm, plain_results):
    with serve(lm, stream_usage=False) as running:
        backend = backend_for(running.base_url, key=None)
        results, measured = measured_generate(backend, STREAM_REQUESTS[:1])
        again, later = measured_generate(backend, STREAM_REQUESTS[1:])
        streamed = [bool(b.get("stream")) for b in running.options.bodies]
    assert results + again == plain_results[0]  # the counts come from plain answers
    assert streamed == [True] + [False] * len(STREAM_REQUESTS)
    assert measured.ttft_s is not None and measured.ttft_s > 0
    assert measured.decode_tokens_per_s is None
    assert later.ttft_s is None and later.decode_tokens_per_s is None


@pytest.mark.data
def test_a_streamed_evaluation_carries_ttft_and_decode_rate(server, datasets_dir):
    bench = load_benchmark("gsm8k", BenchmarkContext(datasets_dir, shots=2, max_new_tokens=16))
    config = EvalConfig(n=2, seed="stream", batch_size=2, prompt_style="plain")
    run = evaluate(bench, backend_for(server.base_url), config)
    measured = run.measurements
    assert measured is not None
    assert measured.ttft_s is not None and measured.ttft_s > 0
    assert measured.decode_tokens_per_s is not None and measured.decode_tokens_per_s > 0
    assert measured.generated_tokens == run.tokens > 2


def test_the_edge_benchmark_cuts_an_endpoints_prompt_by_the_tokens_it_reads(backend):
    """The backend's own count is an estimate (four characters a token); the prompt is
    cut again by the prompt tokens the server reports, so every run reads exactly 24."""
    settings = EdgeSettings(prompt_tokens=24, gen_tokens=3, warmup=1, min_runs=2, min_time_s=0)
    result = run_edge(backend, settings)
    assert [r.prompt_tokens for r in (*result.warmup_runs, *result.runs)] == [24, 24, 24]
    assert result.ttft_s is not None and result.ttft_s.mean > 0
    assert result.prefill_tokens_per_s is not None and result.prefill_tokens_per_s.mean > 0
