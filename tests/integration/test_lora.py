"""LoRA adapters: a tiny adapter made with peft in the test, loaded on its pinned base."""

import json

import pytest
import torch

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.backends.hf import encode_pair
from quorumbench.errors import ModelLoadError
from quorumbench.evaluation.backend import ChoiceRequest

pytestmark = [pytest.mark.model, pytest.mark.slow]

CONTEXT = "Q: What is the largest planet in the solar system?\nA:"
OPTIONS = (" Jupiter.", " The Earth.", " Saturn, by far.")


@pytest.fixture(scope="module")
def adapter_dir(smollm2_dir, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    torch.manual_seed(0)
    config = LoraConfig(
        r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    model = get_peft_model(base, config)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    settings = json.loads((out / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = str(smollm2_dir)
    (out / "adapter_config.json").write_text(json.dumps(settings))
    return out


def _peft_loglikelihoods(smollm2_dir, adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    out = []
    for option in OPTIONS:
        ctx, cont = encode_pair(tokenizer, CONTEXT, option)
        with torch.inference_mode():
            logits = model(torch.tensor([ctx + cont])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        out.append(sum(float(logprobs[len(ctx) - 1 + j, t]) for j, t in enumerate(cont)))
    return out


def test_adapter_loads_on_its_base_and_changes_the_model(smollm2_dir, adapter_dir, smollm2_backend):
    backend = load_backend(f"hf:{adapter_dir}", BackendOptions(device="cpu"))
    try:
        assert backend.info.details["adapter"] == str(adapter_dir)
        assert backend.info.details["base"].startswith(f"hf:{smollm2_dir}@")
        assert backend.info.ref == f"hf:{adapter_dir}@{backend.info.revision}"
        request = ChoiceRequest(CONTEXT, OPTIONS, "planet", OPTIONS, (0, 1, 2))
        (tuned,) = backend.choose([request], batch_size=3)
        (plain,) = smollm2_backend.choose([request], batch_size=3)
        assert (
            max(abs(a - b) for a, b in zip(tuned.loglikelihoods, plain.loglikelihoods, strict=True))
            > 0.01
        )
        expected = _peft_loglikelihoods(smollm2_dir, adapter_dir)
        assert tuned.loglikelihoods == pytest.approx(expected, abs=2e-3)
    finally:
        backend.close()


def test_a_hub_base_must_be_pinned(adapter_dir, tmp_path):
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (tmp_path / name).write_bytes((adapter_dir / name).read_bytes())
    settings = json.loads((tmp_path / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    settings["revision"] = None
    (tmp_path / "adapter_config.json").write_text(json.dumps(settings))
    with pytest.raises(ModelLoadError, match="is not pinned"):
        load_backend(f"hf:{tmp_path}", BackendOptions(device="cpu"))
