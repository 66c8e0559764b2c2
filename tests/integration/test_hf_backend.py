"""The transformers backend on the real SmolLM2-135M-Instruct (loaded once per session).

That multiple-choice predictions do not depend on the batch size (1 and 8) is checked
on 20 TruthfulQA-MC1 items by ``test_prediction_digests.py``, with their scores and
digests (a test here checked the predictions and score of 10 until 2026-12-07).
"""

from pathlib import Path

import pytest
import torch

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.backends.hf import encode_pair
from quorumbench.benchmarks import load_benchmark
from quorumbench.errors import ModelLoadError
from quorumbench.evaluation.backend import ChoiceRequest, GenerateRequest, Prompt
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def backend(smollm2_backend):
    return smollm2_backend


@pytest.fixture(scope="module")
def hf_model(backend):
    return backend.lm.model, backend._tokenizer


def test_info_records_the_content_hash(backend, smollm2_dir):
    info = backend.info
    assert info.backend == "hf"
    assert info.ref == f"hf:{smollm2_dir}@{info.revision}"
    assert len(info.revision) == 64
    assert info.is_chat and info.device == "cpu" and info.dtype == "float32"


def test_gsm8k_on_a_few_samples(backend, datasets_dir):
    bench = load_benchmark("gsm8k", BenchmarkContext(datasets_dir, shots=2, max_new_tokens=48))
    result = evaluate(
        bench, backend, EvalConfig(n=3, seed="it", batch_size=4, prompt_style="plain")
    )
    assert result.n == 3
    assert 0.0 <= result.score <= 1.0
    assert result.tokens > 0
    for sample in result.samples:
        assert sample.output.strip()
        assert "Question:" not in sample.output  # the stop sequence was honoured
        assert 0 < sample.n_tokens <= 48


def test_truthfulqa_mc1_on_a_few_samples(backend, datasets_dir):
    bench = load_benchmark("truthfulqa-mc1", BenchmarkContext(datasets_dir))
    result = evaluate(bench, backend, EvalConfig(n=6, seed="it", batch_size=8))
    assert result.n == 6
    for sample in result.samples:
        assert sample.prediction is not None and sample.prediction.isdigit()
        assert '"loglikelihoods"' in sample.output


def test_two_runs_give_identical_outputs(backend, datasets_dir):
    arith = load_benchmark("arith", BenchmarkContext(max_new_tokens=40))
    a = evaluate(arith, backend, EvalConfig(n=3, seed="det", batch_size=2))
    b = evaluate(arith, backend, EvalConfig(n=3, seed="det", batch_size=2))
    assert a.outputs_sha256 == b.outputs_sha256
    mc1 = load_benchmark("truthfulqa-mc1", BenchmarkContext(datasets_dir))
    c = evaluate(mc1, backend, EvalConfig(n=4, seed="det"))
    d = evaluate(mc1, backend, EvalConfig(n=4, seed="det"))
    assert c.outputs_sha256 == d.outputs_sha256


def _full_forward_loglikelihood(model, tokenizer, context, continuation):
    ctx, cont = encode_pair(tokenizer, context, continuation)
    ids = torch.tensor([ctx + cont])
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return sum(float(logprobs[len(ctx) - 1 + j, t]) for j, t in enumerate(cont))


def test_prefix_cached_loglikelihoods_equal_a_plain_forward(backend, hf_model):
    model, tokenizer = hf_model
    primer = "Q: What is the capital of France?\nA: Paris.\n\nQ: What colour is the sky?\nA:"
    options = (" Blue.", " Green, mostly.", " It depends on the weather and the time of day.")
    request = ChoiceRequest(primer, options, "sky", options, (0, 1, 2))
    (result,) = backend.choose([request, request][:1], batch_size=2)
    expected = [_full_forward_loglikelihood(model, tokenizer, primer, o) for o in options]
    assert result.loglikelihoods == pytest.approx(expected, abs=1e-3)


def test_packed_questions_score_as_one_forward_per_option(backend, hf_model):
    """Several questions in one packed batch (one row each, their options side by side
    behind a mask), with different numbers and lengths of options, a question whose
    options hold more tokens than one packed row takes, and partial scoring (one
    context per option): every log-likelihood is the one a forward of the context and
    that option alone gives, whatever the batch size."""
    model, tokenizer = hf_model
    primer = (
        "Q: What is the capital of France?\nA: Paris.\n\nQ: What colour is grass?\nA: Green.\n\n"
    )
    long_option = " " + "very " * 300 + "long."
    requests = [
        ChoiceRequest(
            primer + "Q: What colour is the sky?\nA:",
            (" Blue.", " Red.", " It varies."),
            "a",
            ("0", "1", "2"),
            (0, 1, 2),
        ),
        ChoiceRequest(
            primer + "Q: How many legs has a cat?\nA:",
            (" Four.", " Three."),
            "b",
            ("0", "1"),
            (0, 1),
        ),
        ChoiceRequest(
            primer + "Q: Is ice cold?\nA:",
            (" Yes.", long_option, " No, never.", long_option + " Twice"),
            "c",
            ("0", "1", "2", "3"),
            (0, 1, 2, 3),
        ),
        ChoiceRequest("Tom went out because the", (" rain stopped.",), "d", ("0",), (0,)),
        ChoiceRequest("Tom went out because it", (" rain stopped.",), "e", ("0",), (0,)),
    ]
    expected = [
        [_full_forward_loglikelihood(model, tokenizer, r.context, c) for c in r.continuations]
        for r in requests
    ]
    assert backend.lm.fast and backend.lm.packed  # SDPA: the packed path runs
    for batch_size in (1, 2, 8):
        results = backend.choose(requests, batch_size=batch_size)
        for result, want in zip(results, expected, strict=True):
            assert result.loglikelihoods == pytest.approx(want, abs=1e-3)
    backend.lm.fast = False  # the unpacked path (models whose cache we cannot manage)
    try:
        slow = backend.choose(requests, batch_size=3)
    finally:
        backend.lm.fast = True
    for result, want in zip(slow, expected, strict=True):
        assert result.loglikelihoods == pytest.approx(want, abs=1e-3)


def test_long_rows_go_fewer_to_a_packed_batch():
    """A packed batch's mask grows with rows × length²: short rows fill the batch,
    long ones are batched fewer at a time, and a row longer than the budget alone."""
    from quorumbench.backends._lm import MAX_MASK_ELEMENTS, _packed_chunks

    def groups_of(lengths):
        seqs = [([1] * n, [2]) for n in lengths]  # row length n + 1
        return [[i] for i in range(len(seqs))], seqs

    groups, seqs = groups_of([10] * 20)
    assert [len(c) for c in _packed_chunks(groups, seqs, 8)] == [8, 8, 4]
    side = int((MAX_MASK_ELEMENTS / 3) ** 0.5)  # three such rows fit, a fourth does not
    groups, seqs = groups_of([side - 1] * 7)
    assert [len(c) for c in _packed_chunks(groups, seqs, 8)] == [3, 3, 1]
    groups, seqs = groups_of([10, 10, 2 * int(MAX_MASK_ELEMENTS**0.5)])
    assert [len(c) for c in _packed_chunks(groups, seqs, 8)] == [2, 1]


PROMPTS = [
    "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:",
    "Question: What is 12 times 3?\nAnswer:",
    "Question: A train travels 60 km in one hour. How far does it go in 3 hours?\nAnswer:",
    "Question: Name a primary colour.\nAnswer:",
    "Question: Ann reads 5 pages a day. How many pages in a week?\nAnswer:",
]


def _hf_generate(model, tokenizer, prompt, max_new_tokens):
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(
            ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id
        )
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_continuous_batching_equals_transformers_generate(backend, hf_model):
    model, tokenizer = hf_model
    budgets = [24, 8, 32, 4, 16]  # rows finish at different steps, so slots get refilled
    requests = [
        GenerateRequest(Prompt(text=p), (), n) for p, n in zip(PROMPTS, budgets, strict=True)
    ]
    results = backend.generate(requests, batch_size=2)
    for prompt, budget, result in zip(PROMPTS, budgets, results, strict=True):
        assert result.text == _hf_generate(model, tokenizer, prompt, budget)
        assert result.finish_reason in ("length", "eos")


def test_fallback_path_equals_the_fast_path(backend):
    requests = [GenerateRequest(Prompt(text=p), ("\n\n",), 20) for p in PROMPTS]
    fast = backend.generate(requests, batch_size=3)
    backend.lm.fast = False
    try:
        slow = backend.generate(requests, batch_size=3)
    finally:
        backend.lm.fast = True
    assert [r.text for r in fast] == [r.text for r in slow]


def test_stop_sequences_cut_the_text(backend):
    request = GenerateRequest(Prompt(text=PROMPTS[0]), (" ",), 20)
    (result,) = backend.generate([request], batch_size=1)
    assert " " not in result.text
    assert result.finish_reason == "stop"


def test_pickled_weights_are_refused_unless_allowed(smollm2_dir, tmp_path):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    config.save_pretrained(tmp_path)
    torch.save(LlamaForCausalLM(config).state_dict(), tmp_path / "pytorch_model.bin")
    tokenizer.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))
    with pytest.raises(ModelLoadError, match="allow pickled weights if you trust") as info:
        load_backend(f"hf:{tmp_path}", BackendOptions(device="cpu"))
    assert info.value.hint is not None and info.value.hint.setting == "allow_pickle"
    assert "--" not in info.value.message  # the CLI adds its flag (tests/integration/cli)
    trusted = load_backend(f"hf:{tmp_path}", BackendOptions(device="cpu", allow_pickle=True))
    (result,) = trusted.generate([GenerateRequest(Prompt(text="Hi"), (), 3)], batch_size=1)
    assert result.n_tokens <= 3


def test_a_directory_without_weights_is_refused(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="no model weights"):
        load_backend(f"hf:{tmp_path}", BackendOptions(device="cpu"))


def test_a_wrong_pinned_hash_is_refused(smollm2_dir):
    with pytest.raises(ModelLoadError, match="but the ref pins"):
        load_backend(f"hf:{smollm2_dir}@{'0' * 64}", BackendOptions(device="cpu"))


@pytest.mark.gpu
def test_cuda_gives_the_cpu_predictions(smollm2_dir, datasets_dir, backend):
    """Opt-in (--gpu): the same MC predictions on CUDA (float32) as on the CPU."""
    cuda = load_backend(f"hf:{smollm2_dir}", BackendOptions(device="cuda", dtype="float32"))
    try:
        bench = load_benchmark("truthfulqa-mc1", BenchmarkContext(datasets_dir))
        on_gpu = evaluate(bench, cuda, EvalConfig(n=10, seed="gpu"))
        on_cpu = evaluate(bench, backend, EvalConfig(n=10, seed="gpu"))
        assert [s.prediction for s in on_gpu.samples] == [s.prediction for s in on_cpu.samples]
        assert on_gpu.model["device"] == "cuda"
    finally:
        cuda.close()
