"""The bundled GGUF on llama.cpp in process (``backends/llamacpp.py``), against the
transformers path on the same file de-quantized (``smollm2_backend``).

Quantized kernels move each option's log-likelihood a little (measured on 2026-12-06:
at most 0.68 nats on 20 gen-reasoning items, 0.91 on 20 TruthfulQA-MC1 items), never
by the several nats a misaligned token would; the chosen options of the fixed items
below are the same. The tokens the two paths feed the model are the same too: the same
tokenizer, and the chat template from the GGUF renders as transformers renders it.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.backends._llama_lib import XLLAMACPP_VERSION
from quorumbench.benchmarks import load_benchmark
from quorumbench.errors import ConfigError
from quorumbench.evaluation.backend import ChatMessage, GenerateRequest, Prompt
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.usage import recording_usage

pytestmark = [pytest.mark.model]

MAX_NATS_APART = 1.5
ITEMS = 12
THREADS = int(os.environ.get("OMP_NUM_THREADS") or 0) or None


@pytest.fixture(scope="module")
def llama(smollm2_gguf):
    backend = load_backend(
        f"gguf:{smollm2_gguf}", BackendOptions(engine="llamacpp", threads=THREADS)
    )
    yield backend
    backend.close()


def test_it_loads_the_file_as_it_is_and_says_so(llama, smollm2_gguf):
    info = llama.info
    assert info.backend == "llamacpp" and info.details["engine"] == "llama.cpp"
    assert info.dtype == "q4_1" and info.is_chat
    assert info.ref.startswith(f"gguf:{smollm2_gguf}@") and info.revision in info.ref
    assert info.details["xllamacpp"] == XLLAMACPP_VERSION


def test_prompts_are_the_tokens_transformers_feeds(llama, smollm2_backend):
    texts = ["Q: What is 2 + 3?\nA:", " déjà vu ✓ 東京", ""]
    for text in texts:
        assert llama.encode_prompt(Prompt(text=text)) == smollm2_backend.encode_prompt(
            Prompt(text=text)
        )
    chat = Prompt(messages=(ChatMessage("user", "Name a prime number."),))
    assert llama.encode_prompt(chat) == smollm2_backend.encode_prompt(chat)
    for context, continuation in [("Q: 2+2?\nA: ", "4"), ("", "hello"), ("The sky is", " blue")]:
        assert llama.encode_pair(context, continuation) == _hf_pair(
            smollm2_backend, context, continuation
        )


def _hf_pair(backend, context, continuation):
    from quorumbench.backends.hf import encode_pair

    return encode_pair(backend._tokenizer, context, continuation)


def test_multiple_choice_agrees_with_the_transformers_path(llama, smollm2_backend):
    bench = load_benchmark("gen-reasoning", BenchmarkContext())
    config = EvalConfig(ITEMS, "llamacpp-engine", 4)
    ours, theirs = evaluate(bench, llama, config), evaluate(bench, smollm2_backend, config)
    assert [s.id for s in ours.samples] == [s.id for s in theirs.samples]
    assert [s.prediction for s in ours.samples] == [s.prediction for s in theirs.samples]
    for mine, reference in zip(ours.samples, theirs.samples, strict=True):
        a = json.loads(mine.output)["loglikelihoods"]
        b = json.loads(reference.output)["loglikelihoods"]
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < MAX_NATS_APART


def test_scores_do_not_depend_on_what_was_cached_before(llama):
    bench = load_benchmark("gen-reasoning", BenchmarkContext())
    config = EvalConfig(6, "cache-order", 4)
    first = evaluate(bench, llama, config)
    evaluate(bench, llama, EvalConfig(6, "something-else", 4))  # other prefixes cached
    again = evaluate(bench, llama, config)
    assert [s.output for s in first.samples] == [s.output for s in again.samples]


def test_long_inputs_go_in_chunks_and_keep_the_chain_rule(llama):
    """Contexts and continuations longer than one llama_decode call (128 tokens): the
    log-likelihood of a continuation is the sum of its two halves' (the second half's
    context holding the first), whatever is cached and however the tokens are chunked."""
    words = " ".join(f"item {i} is {i * 7 % 13}." for i in range(100))
    tokens = llama.encode_prompt(Prompt(text=words))
    assert len(tokens) > 600
    context, continuation = tokens[:300], tokens[300:600]
    whole = llama._loglikelihood(context, continuation)
    first = llama._loglikelihood(context, continuation[:130])
    second = llama._loglikelihood(context + continuation[:130], continuation[130:])
    # not exact: the halves' tokens go through llama_decode in other calls, which moves
    # each a little (0.13 nats over these 300 measured); an off-by-one costs many nats
    assert whole == pytest.approx(first + second, abs=0.3)
    assert llama._loglikelihood(context, continuation) == pytest.approx(whole, abs=1e-3)


def test_generation_stops_where_it_is_told(llama):
    prompt = Prompt(text="Count: 1, 2, 3, 4,")
    [free] = llama.generate([GenerateRequest(prompt, (), 12)], batch_size=1)
    assert free.finish_reason == "length" and free.n_tokens == 12
    assert free.text.startswith(" 5, 6")
    [stopped] = llama.generate([GenerateRequest(prompt, (" 7",), 12)], batch_size=1)
    assert stopped.finish_reason == "stop" and stopped.text == free.text[: free.text.index(" 7")]
    # the same request again, its prompt now cached, gives the same text
    [cached] = llama.generate([GenerateRequest(prompt, (), 12)], batch_size=1)
    [cold] = llama.generate([GenerateRequest(prompt, (), 12, cache_prefix=False)], batch_size=1)
    assert cached == cold == free


def test_a_chat_answer_ends_at_end_of_turn_and_is_measured(llama):
    chat = Prompt(messages=(ChatMessage("user", "Say hello in one word."),))
    with recording_usage() as usage:
        [answer] = llama.generate([GenerateRequest(chat, (), 64)], batch_size=1)
    assert answer.finish_reason == "eos" and 0 < answer.n_tokens < 64
    assert "<|im_end|>" not in answer.text and answer.text.strip()
    assert usage.prompt_tokens == len(llama.encode_prompt(chat))
    assert len(usage.ttft_s) == 1 and usage.decode_s is not None


def test_batched_generation_is_one_at_a_time_token_for_token(llama):
    """Several sequences decoded together give exactly the texts of one at a time: each
    stops for its own reason (EOS, a stop sequence, its token limit) and its slot takes
    the next request; a sequence's logits do not depend on its batch-mates."""
    chat = Prompt(messages=(ChatMessage("user", "Say hello in one word."),))
    count = Prompt(text="Count: 1, 2, 3, 4,")
    code = Prompt(text='def add(a, b):\n    """Add two numbers."""\n')
    requests = [
        GenerateRequest(chat, (), 48),
        GenerateRequest(count, (" 9",), 40),
        GenerateRequest(code, (), 30),
        GenerateRequest(count, (), 7),
        GenerateRequest(code, ("\n\n",), 60),
        GenerateRequest(chat, (), 20, ignore_eos=True),
        GenerateRequest(Prompt(text="The capital of France is"), (".",), 16),
    ]
    alone = llama.generate(requests, batch_size=1)
    assert {r.finish_reason for r in alone} == {"eos", "stop", "length"}
    for slots in (3, 8):  # fewer slots than requests (slots refilled), and more
        with recording_usage() as usage:
            together = llama.generate(requests, batch_size=slots)
        assert together == alone, slots
        assert usage.prompt_tokens == sum(len(llama.encode_prompt(r.prompt)) for r in requests)
    # a few-shot task's digests at batch 1 and 5 (its long shared primer is reused one
    # request at a time), and again after other prompts: a primer reused at any length
    # once changed one answer in five; only whole aligned chunks are reused now
    bench = load_benchmark("arith", BenchmarkContext(max_new_tokens=24))
    one = evaluate(bench, llama, EvalConfig(5, "llamacpp-batch", 1))
    five = evaluate(bench, llama, EvalConfig(5, "llamacpp-batch", 5))
    evaluate(bench, llama, EvalConfig(3, "something-else", 1))
    again = evaluate(bench, llama, EvalConfig(5, "llamacpp-batch", 1))
    digests = {(r.outputs_sha256, r.predictions_sha256) for r in (one, five, again)}
    assert len(digests) == 1


def test_a_long_sequence_has_the_same_logits_beside_a_batch_mate(llama):
    """Past 256 cached tokens llama.cpp's CPU flash-attention kernel gave a sequence other
    logits when its decode call held another sequence's token too (every step, from a
    300-token prompt): batched answers of 1,024 tokens then differed from one at a time.
    Contexts run without it; each step's logits are compared bit for bit."""
    lm = llama._llama
    prompt = lm.tokenize(b"def add(a, b):\n    return a + b\n\n" * 30, special=False)[:300]

    def steps(batch_mate: bool) -> list[np.ndarray]:
        ctx = lm.context(n_ctx=2 * 512, n_seq=2, n_batch=lm.n_batch)
        try:
            for seq in (0, 1) if batch_mate else (0,):
                for at in range(0, len(prompt), lm.n_batch):
                    chunk = prompt[at : at + lm.n_batch]
                    ctx.decode([(t, at + i, seq, seq == 0) for i, t in enumerate(chunk)])
            out, token = [], 0
            for position in range(len(prompt), len(prompt) + 8):
                items = [(token, position, 0, True)]
                if batch_mate:
                    items.append((token, position, 1, True))
                rows = np.ctypeslib.as_array(ctx.decode(items), shape=(len(items), lm.n_vocab))
                out.append(rows[0].copy())
                token = int(rows[0].argmax())
            return out
        finally:
            ctx.close()

    alone, beside = steps(False), steps(True)
    assert all(np.array_equal(a, b) for a, b in zip(alone, beside, strict=True))


def test_generation_is_the_transformers_path_where_the_kernels_agree(llama, smollm2_backend):
    """Arithmetic answers, greedy: the same text where quantization does not tip a
    greedy choice (measured on 2026-12-06: 3 of these 6 identical; on 5 GSM8K items 2,
    the rest diverging after tens of tokens)."""
    bench = load_benchmark("arith", BenchmarkContext(max_new_tokens=24))  # offline, short answers
    config = EvalConfig(6, "llamacpp-gen", 4)
    ours, theirs = evaluate(bench, llama, config), evaluate(bench, smollm2_backend, config)
    same = sum(a.output == b.output for a, b in zip(ours.samples, theirs.samples, strict=True))
    assert same >= 1, [
        (a.output, b.output) for a, b in zip(ours.samples, theirs.samples, strict=True)
    ]
    assert all(s.output.strip() for s in ours.samples)


def test_only_gguf_files_run_on_llama_cpp(smollm2_dir):
    with pytest.raises(ConfigError, match="runs on transformers"):
        load_backend(f"hf:{smollm2_dir}", BackendOptions(engine="llamacpp"))
    for ref in ("bundled:smollm2-135m-instruct", f"hf:{smollm2_dir}"):
        with pytest.raises(ConfigError, match="unknown engine"):
            load_backend(ref, BackendOptions(engine="vllm"))
