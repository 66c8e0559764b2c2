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
from quorumbench.benchmarks.truthfulqa import context_for, letter_order
from quorumbench.evaluation.backend import ChatMessage, ChoiceRequest, GenerateRequest, Prompt
from quorumbench.evaluation.extract import truncate_at_stop
from quorumbench.evaluation.refs import parse_ref

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
