"""A PEFT LoRA adapter on the bundled GGUF, run by llama.cpp (``backends/gguf_lora.py``)
against the same adapter on the de-quantized checkpoint through transformers and peft.

The adapter is made here with peft on the transformers conversion, on the query and
key projections: the two whose rows llama.cpp's LLaMA layout permutes, so a
conversion that skipped the permutation would apply the adapter to the wrong rows.
Quantized kernels move every log-likelihood a little (``test_llamacpp_backend.py``),
so the check is on what the adapter changes: per option, the adapter's shift of the
log-likelihood on llama.cpp follows its shift on transformers (over 30 options,
correlation 0.94 on 2026-12-07; 0.16 with the permutation left out).
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from quorumbench.backends import BackendOptions, gguf_lora
from quorumbench.backends.hf import load_transformers_dir
from quorumbench.backends.local import fetch_model, load_local
from quorumbench.evaluation.backend import ChoiceRequest, GenerateRequest, Prompt
from quorumbench.evaluation.refs import parse_ref

pytestmark = [pytest.mark.model]

THREADS = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
WORDS = [
    "the",
    "cat",
    "dog",
    "sat",
    "on",
    "a",
    "mat",
    "blue",
    "red",
    "sky",
    "river",
    "hill",
    "quickly",
    "slowly",
    "runs",
    "eats",
]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, smollm2_dir, smollm2_gguf):
    """A LoRA on q_proj and k_proj made with peft, naming the bundled file as its base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from quorumbench.backends._files import file_sha256

    out = tmp_path_factory.mktemp("lora") / "adapter"
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    torch.manual_seed(7)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj"], init_lora_weights=False
    )
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.mul_(0.5)
    model.save_pretrained(out)
    path = out / "adapter_config.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    saved["base_model_name_or_path"] = f"bundled:smollm2-135m-instruct@{file_sha256(smollm2_gguf)}"
    path.write_text(json.dumps(saved), encoding="utf-8")
    return out


def _requests(n: int = 10) -> list[ChoiceRequest]:
    draw = random.Random(3)
    out = []
    for _ in range(n):
        context = " ".join(draw.choice(WORDS) for _ in range(10))
        options = tuple(" " + " ".join(draw.choice(WORDS) for _ in range(3)) for _ in range(3))
        out.append(ChoiceRequest(context, options, context, options, (0, 1, 2)))
    return out


def _loglikelihoods(backend) -> np.ndarray:
    try:
        results = backend.choose(_requests(), batch_size=1)
    finally:
        backend.close()
    return np.array([r.loglikelihoods for r in results]).ravel()


def _llama(adapter, model_cache_dir):
    options = BackendOptions(engine="llamacpp", threads=THREADS, cache_dir=model_cache_dir)
    return load_local(fetch_model(f"hf:{adapter}", options), options)


def test_the_adapter_shifts_llama_cpp_as_it_shifts_transformers(
    adapter, smollm2_dir, smollm2_gguf, model_cache_dir, monkeypatch
):
    options = BackendOptions(engine="llamacpp", threads=THREADS, cache_dir=model_cache_dir)
    model = fetch_model(f"hf:{adapter}", options)
    assert model.gguf_file == smollm2_gguf and model.base_ref is not None
    assert model.base_ref.canonical().startswith("bundled:smollm2-135m-instruct@")
    llama = load_local(model, options)
    info = llama.info
    assert info.backend == "llamacpp" and info.ref == model.ref.canonical()
    assert info.details["base"] == model.base_ref.canonical()
    with_adapter = _loglikelihoods(llama)
    base = _loglikelihoods(load_local(fetch_model(f"gguf:{smollm2_gguf}", options), options))

    ref = parse_ref(f"hf:{smollm2_dir}")
    hf = BackendOptions(device="cpu")
    hf_base = _loglikelihoods(load_transformers_dir(smollm2_dir, ref, "x", hf, backend="hf"))
    hf_adapter = _loglikelihoods(
        load_transformers_dir(smollm2_dir, ref, "x", hf, backend="hf", adapter=(adapter, ref))
    )
    shift, hf_shift = with_adapter - base, hf_adapter - hf_base
    assert np.abs(hf_shift).max() > 1.0, "the adapter must change the model to test anything"
    agreement = np.corrcoef(shift, hf_shift)[0, 1]
    assert agreement > 0.85, agreement

    # the same conversion without the query/key permutation: the adapter lands on the
    # wrong rows, and the shifts no longer follow (so the check above can fail)
    monkeypatch.setitem(gguf_lora.ARCHITECTURES, "llama", False)
    unpermuted = _loglikelihoods(_llama(adapter, model_cache_dir)) - base
    assert np.corrcoef(unpermuted, hf_shift)[0, 1] < agreement - 0.4


def test_generation_with_the_adapter_is_the_same_at_any_batch_size(
    adapter, smollm2_gguf, model_cache_dir
):
    prompts = [
        "The capital of France is",
        "1, 2, 3, 4,",
        "Once upon a time",
        "def add(a, b):",
        "Water boils at",
    ]
    requests = [GenerateRequest(Prompt(text=t), max_new_tokens=24) for t in prompts]
    options = BackendOptions(engine="llamacpp", threads=THREADS, cache_dir=model_cache_dir)
    plain = load_local(fetch_model(f"gguf:{smollm2_gguf}", options), options)
    llama = _llama(adapter, model_cache_dir)
    try:
        base = [r.text for r in plain.generate(requests, batch_size=1)]
        alone = [r.text for r in llama.generate(requests, batch_size=1)]
        batched = {n: [r.text for r in llama.generate(requests, batch_size=n)] for n in (2, 5)}
    finally:
        llama.close()
        plain.close()
    # The batch's own contexts apply the adapter too, and a sequence decodes as it does
    # alone: with float32 (or float16) adapter tensors it did not (2 texts of these 5
    # changed at batch 2, 3 and 5 on 2026-12-07; their products take other kernels for
    # other numbers of tokens per call), with Q8_0 ones it does.
    assert alone != base
    assert batched == {2: alone, 5: alone}
