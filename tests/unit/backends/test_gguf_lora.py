"""PEFT LoRA → GGUF LoRA (``backends/gguf_lora.py``) on a tiny LLaMA-shaped GGUF base:
names, shapes (the rank padded to 32, ``lora_a`` in Q8_0), peft's scales folded into
``lora_b``, the query/key row order that transformers' GGUF loader undoes, and every
adapter llama.cpp cannot run refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from quorumbench.backends.gguf_lora import peft_to_gguf_lora  # noqa: E402
from quorumbench.errors import ModelLoadError  # noqa: E402

HEADS, HEADS_KV, HEAD_DIM = 2, 1, 16
EMBD = HEADS * HEAD_DIM  # 32: Q8_0's block
RANK = 2


def _base(path: Path, arch: str = "llama") -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(1)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS_KV)
    for name, out in (("attn_q", EMBD), ("attn_k", HEADS_KV * HEAD_DIM), ("attn_v", 4)):
        writer.add_tensor(f"blk.0.{name}.weight", np.zeros((out, EMBD), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _adapter(path: Path, modules=("q_proj", "k_proj", "v_proj"), **config) -> dict:
    path.mkdir()
    draw = np.random.default_rng(0)
    outs = {"q_proj": EMBD, "k_proj": HEADS_KV * HEAD_DIM, "v_proj": 4, "gate_proj": 16}
    weights = {}
    for module in modules:
        key = f"base_model.model.model.layers.0.self_attn.{module}"
        if module == "gate_proj":
            key = f"base_model.model.model.layers.0.mlp.{module}"
        weights[f"{key}.lora_A.weight"] = draw.standard_normal((RANK, EMBD)).astype(np.float32)
        weights[f"{key}.lora_B.weight"] = draw.standard_normal((outs[module], RANK)).astype(
            np.float32
        )
    safetensors_numpy.save_file(weights, str(path / "adapter_model.safetensors"))
    settings = {"peft_type": "LORA", "r": RANK, "lora_alpha": 8, "bias": "none", **config}
    (path / "adapter_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return weights


def _tensors(path: Path) -> dict[str, object]:
    """Each tensor in peft's row-major layout (Q8_0 ones de-quantized), the rank's zero
    padding cut off again after checking it is zero."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        data = gguf.dequantize(np.array(t.data), t.tensor_type)
        data = data.reshape(tuple(reversed(t.shape.tolist())))
        if t.name.endswith(".lora_a"):
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0 and data.shape[0] == 32
            assert not data[RANK:].any()
            data = data[:RANK]
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and data.shape[1] == 32
            assert not data[:, RANK:].any()
            data = data[:, :RANK]
        out[t.name] = data
    return out


def _undo_llama_order(b, heads):
    """transformers' ``_reverse_permute_weights`` (its GGUF loader's LLaMA q/k rows)."""
    dim = b.shape[0] // heads // 2
    return b.reshape(heads, dim, 2, *b.shape[1:]).swapaxes(2, 1).reshape(b.shape)


def test_an_adapter_becomes_a_gguf_lora_with_peft_scales_and_llama_row_order(tmp_path):
    base = _base(tmp_path / "base.gguf")
    weights = _adapter(tmp_path / "adapter")
    out = tmp_path / "lora.gguf"
    peft_to_gguf_lora(tmp_path / "adapter", base, out)

    reader = gguf.GGUFReader(out)
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.type"].contents() == "lora"
    assert reader.fields["adapter.lora.alpha"].contents() == 0.0  # scale 1: folded into b
    tensors = _tensors(out)
    assert sorted(tensors) == sorted(f"blk.0.attn_{p}.weight.lora_{x}" for p in "qkv" for x in "ab")
    scale = 8 / RANK
    prefix = "base_model.model.model.layers.0.self_attn"
    for proj, heads in (("q", HEADS), ("k", HEADS_KV), ("v", None)):
        a = weights[f"{prefix}.{proj}_proj.lora_A.weight"]
        b = weights[f"{prefix}.{proj}_proj.lora_B.weight"] * scale
        # Q8_0: a scale per 32 values, each value within half a step of 1/127 of the max
        step = np.abs(a).max() / 127
        assert np.allclose(tensors[f"blk.0.attn_{proj}.weight.lora_a"], a, rtol=0, atol=step)
        stored = tensors[f"blk.0.attn_{proj}.weight.lora_b"]
        if heads is None:
            assert np.allclose(stored, b)
        else:  # permuted as llama.cpp stores q/k rows; transformers' loader undoes it
            assert not np.allclose(stored, b)
            assert np.allclose(_undo_llama_order(stored, heads), b)


def test_rslora_and_alpha_patterns_keep_peft_scale(tmp_path):
    base = _base(tmp_path / "base.gguf")
    weights = _adapter(
        tmp_path / "adapter", modules=("v_proj",), use_rslora=True, alpha_pattern={"v_proj": 2}
    )
    peft_to_gguf_lora(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    b = weights["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"]
    stored = _tensors(tmp_path / "lora.gguf")["blk.0.attn_v.weight.lora_b"]
    assert np.allclose(stored, b * 2 / np.sqrt(RANK))


def test_a_qwen2_base_keeps_peft_row_order(tmp_path):
    base = _base(tmp_path / "base.gguf", arch="qwen2")
    weights = _adapter(tmp_path / "adapter", modules=("q_proj",))
    peft_to_gguf_lora(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    b = weights["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    assert np.allclose(_tensors(tmp_path / "lora.gguf")["blk.0.attn_q.weight.lora_b"], b * 4)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"use_dora": True}, "use_dora"),
        ({"bias": "all"}, "bias"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"peft_type": "IA3"}, "peft_type"),
    ],
)
def test_what_llama_cpp_lora_cannot_express_is_refused(tmp_path, config, reason):
    base = _base(tmp_path / "base.gguf")
    _adapter(tmp_path / "adapter", **config)
    with pytest.raises(ModelLoadError, match=f"cannot express {reason}"):
        peft_to_gguf_lora(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    assert not (tmp_path / "lora.gguf").exists()


def test_a_module_the_base_lacks_or_an_unknown_architecture_is_refused(tmp_path):
    base = _base(tmp_path / "base.gguf")
    _adapter(tmp_path / "adapter", modules=("gate_proj",))
    with pytest.raises(ModelLoadError, match="has no tensor in base.gguf"):
        peft_to_gguf_lora(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    other = _base(tmp_path / "other.gguf", arch="gpt2")
    _adapter(tmp_path / "adapter2", modules=("q_proj",))
    with pytest.raises(ModelLoadError, match="architecture 'gpt2'"):
        peft_to_gguf_lora(tmp_path / "adapter2", other, tmp_path / "lora2.gguf")


def test_broken_adapters_are_refused_with_the_reason(tmp_path):
    base = _base(tmp_path / "base.gguf")
    out = tmp_path / "lora.gguf"
    weights = _adapter(tmp_path / "adapter", modules=("q_proj",))
    (tmp_path / "adapter" / "adapter_model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="holds no adapter_model.safetensors"):
        peft_to_gguf_lora(tmp_path / "adapter", base, out)
    broken = {
        "a stray weight": {**weights, "base_model.model.lm_head.weight": np.zeros((2, 2))},
        "half a pair": {k: v for k, v in weights.items() if "lora_A" in k},
        "a wrong shape": {k: v[:, :3] if "lora_A" in k else v for k, v in weights.items()},
    }
    reasons = {
        "a stray weight": "is not a LoRA weight",
        "a wrong shape": r"LoRA is \(32×2\)·\(2×3\), blk.0.attn_q.weight is 32×32",
        "half a pair": "lacks lora_A or lora_B",
    }
    for what, tensors in broken.items():
        safetensors_numpy.save_file(
            {k: v.astype(np.float32) for k, v in tensors.items()},
            str(tmp_path / "adapter" / "adapter_model.safetensors"),
        )
        with pytest.raises(ModelLoadError, match=reasons[what]):
            peft_to_gguf_lora(tmp_path / "adapter", base, out)
    (tmp_path / "adapter" / "adapter_config.json").write_text("{", encoding="utf-8")
    with pytest.raises(ModelLoadError, match="cannot read"):
        peft_to_gguf_lora(tmp_path / "adapter", base, out)
    assert not out.exists()


def test_a_width_q8_0_cannot_hold_keeps_lora_a_in_float32(tmp_path, monkeypatch):
    from quorumbench.backends import gguf_lora

    monkeypatch.setattr(gguf_lora, "_BLOCK", 64)  # the tiny base's 32 is no multiple of 64
    base = _base(tmp_path / "base.gguf")
    weights = _adapter(tmp_path / "adapter", modules=("v_proj",))
    peft_to_gguf_lora(tmp_path / "adapter", base, tmp_path / "lora.gguf")
    [a, _] = gguf.GGUFReader(tmp_path / "lora.gguf").tensors
    assert a.name.endswith("lora_a") and a.tensor_type == gguf.GGMLQuantizationType.F32
    stored = np.array(a.data).reshape(64, EMBD)
    a_peft = weights["base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"]
    assert np.array_equal(stored[:RANK], a_peft) and not stored[RANK:].any()
