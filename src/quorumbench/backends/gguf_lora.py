"""A PEFT LoRA adapter as llama.cpp's GGUF LoRA file, for a base that is a GGUF file.

A LoRA adapter made with peft on a GGUF model (its transformers conversion, which is
how one trains on it) runs on llama.cpp with the file itself: the adapter's tensors
are renamed to the GGUF's (``model.layers.3.self_attn.q_proj`` → ``blk.3.attn_q``) and
written as a GGUF adapter (``general.type = adapter``, ``adapter.type = lora``), which
``llama_adapter_lora_init`` reads. The shapes stay peft's: ``lora_a`` is (r, in),
``lora_b`` (out, r), row-major, which is what llama.cpp checks against the base tensor.

Three things differ from peft's layout and are done here:

* **Scaling.** llama.cpp scales an adapter by ``alpha / r`` with one alpha per file;
  peft by ``lora_alpha / r`` per module, ``lora_alpha / sqrt(r)`` with rsLoRA, or by
  ``alpha_pattern`` / ``rank_pattern`` entries. Each module's peft scale is folded into
  its ``lora_b`` and the file's alpha is 0, which llama.cpp reads as a scale of 1.
* **Query and key rows.** llama.cpp's converter stores a LLaMA model's ``q_proj`` and
  ``k_proj`` weights with the rows of each head permuted (rotary halves interleaved),
  and transformers' GGUF loader permutes them back. An adapter's ``lora_b`` of those
  projections is permuted the same way (its ``lora_a`` reads the unchanged input).
* **Types.** ``lora_a`` is stored as Q8_0, its rank padded with zero rows to Q8_0's
  32-value blocks (``lora_b`` gets the matching zero columns, in float32). With a
  float32 (or float16) ``lora_a``, llama.cpp's product of it takes other kernels for
  other numbers of tokens per call, so a sequence generated in a batch came out
  unlike the same sequence alone (2 texts in 5 at batch 2, 3 and 5, measured on
  2026-12-07), and runners with other batch sizes would disagree; the quantized
  product is computed row by row, the same in any batch, as the base's own weights
  are. The adapter's shifts still follow peft's closely
  (``tests/integration/test_llamacpp_lora.py``).

Adapters llama.cpp's LoRA cannot express are refused with the reason: DoRA, biases,
``modules_to_save``, embeddings, or a module the GGUF has no tensor for. Architectures
whose converter changes other tensors' layout are refused too (:data:`ARCHITECTURES`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from quorumbench.errors import ModelLoadError

ARCHITECTURES = {"llama": True, "qwen2": False, "qwen3": False, "phi3": False, "gemma": False}
"""The GGUF architectures an adapter converts for, and whether their query and key rows
are stored permuted (``convert_hf_to_gguf.py``: ``LlamaModel.permute``); the others
store peft's layout as it is."""

_MODULE = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<part>[AB])\.weight$")


def peft_to_gguf_lora(adapter_dir: Path, base_gguf: Path, out: Path) -> None:
    """Write ``adapter_dir``'s PEFT LoRA as a GGUF LoRA file ``out`` for ``base_gguf``."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = _lora_config(adapter_dir)
    weights_path = adapter_dir / "adapter_model.safetensors"
    if not weights_path.is_file():
        raise ModelLoadError(f"{adapter_dir} holds no adapter_model.safetensors")
    base = gguf.GGUFReader(base_gguf)
    arch = _field(base, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(
            f"LoRA adapters on a GGUF base of architecture {arch!r} do not run on llama.cpp "
            f"here (only {', '.join(sorted(ARCHITECTURES))}); register the adapter on the "
            "base's transformers checkpoint instead"
        )
    blocks = int(_field(base, f"{arch}.block_count"))
    heads = int(_field(base, f"{arch}.attention.head_count"))
    heads_kv = int(_field(base, f"{arch}.attention.head_count_kv") or heads)
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in base.tensors}
    [model_arch] = [k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch]
    names = gguf.get_tensor_name_map(model_arch, blocks)

    pairs: dict[str, dict[str, Any]] = {}
    for key, value in load_file(str(weights_path)).items():
        found = _MODULE.match(key)
        if found is None:
            raise ModelLoadError(f"{weights_path.name}: {key} is not a LoRA weight llama.cpp runs")
        pairs.setdefault(found["module"], {})[found["part"]] = value.astype(np.float32)

    tensors: list[tuple[str, Any]] = []
    for module in sorted(pairs):
        parts = pairs[module]
        if set(parts) != {"A", "B"}:
            raise ModelLoadError(f"{weights_path.name}: {module} lacks lora_A or lora_B")
        target = names.get_name(f"{module}.weight", try_suffixes=(".weight",))
        if target is None or target not in shapes:
            raise ModelLoadError(
                f"{weights_path.name}: {module} has no tensor in {base_gguf.name} to adapt"
            )
        a, b = parts["A"], parts["B"]
        rank = a.shape[0]
        # GGUF shapes are (in, out) for a weight of peft's (out, in)
        if b.shape[1] != rank or shapes[target] != (a.shape[1], b.shape[0]):
            raise ModelLoadError(
                f"{weights_path.name}: {module}'s LoRA is ({b.shape[0]}×{rank})·({rank}×"
                f"{a.shape[1]}), {target} is {shapes[target][1]}×{shapes[target][0]}"
            )
        b = b * np.float32(_scale(config, module, rank))
        if ARCHITECTURES[arch] and target.endswith((".attn_q.weight", ".attn_k.weight")):
            b = _permute_rows(b, heads if target.endswith("q.weight") else heads_kv)
        tensors += [(f"{target}.lora_a", a), (f"{target}.lora_b", b)]
    writer = gguf.GGUFWriter(out, arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 0.0)  # 0: scale 1, folded into lora_b
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, tensor in tensors:
        # Q8_0: the same product in any batch (above); a width that is no multiple of
        # 32 cannot be, and such a base's own weights are no Q8_0 either
        if name.endswith(".lora_a") and tensor.shape[1] % _BLOCK == 0:
            writer.add_tensor(name, gguf.quantize(_padded(tensor, name), q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, np.ascontiguousarray(_padded(tensor, name)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _lora_config(adapter_dir: Path) -> dict[str, Any]:
    path = adapter_dir / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    refused = {
        "peft_type": config.get("peft_type", "LORA") != "LORA",
        "use_dora": bool(config.get("use_dora")),
        "bias": config.get("bias", "none") != "none" or bool(config.get("lora_bias")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "layer_replication": bool(config.get("layer_replication")),
        "trainable_token_indices": bool(config.get("trainable_token_indices")),
    }
    wrong = [key for key, bad in refused.items() if bad]
    if wrong:
        raise ModelLoadError(
            f"{path.name}: llama.cpp's LoRA cannot express {', '.join(wrong)} "
            f"({', '.join(f'{k}={config.get(k)!r}' for k in wrong)})"
        )
    return dict(config)


def _scale(config: dict[str, Any], module: str, rank: int) -> float:
    """peft's scale of ``module``: its (pattern's) alpha over r, or over sqrt(r) (rsLoRA)."""
    alpha = float(config.get("lora_alpha", 8))
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.search(rf"(^|\.){pattern}$", module):
            alpha = float(value)
            break
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _padded(tensor: Any, name: str) -> Any:
    """``tensor`` with its rank padded with zeros to a multiple of Q8_0's 32-value block
    (``lora_a``'s rows, ``lora_b``'s columns): the same product, and ``lora_a``'s rows
    quantizable."""
    import numpy as np

    rank = tensor.shape[0] if name.endswith(".lora_a") else tensor.shape[1]
    extra = -rank % _BLOCK
    if name.endswith(".lora_a"):
        return np.pad(tensor, ((0, extra), (0, 0)))
    return np.pad(tensor, ((0, 0), (0, extra)))


_BLOCK = 32


def _permute_rows(b: Any, heads: int) -> Any:
    """The rows of ``b`` (out × r) in the order llama.cpp's converter stores a LLaMA
    query or key weight: per head, the two rotary halves interleaved."""
    out = b.shape[0]
    return b.reshape(heads, 2, out // heads // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()
