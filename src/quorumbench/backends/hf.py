"""The transformers backend: Hub or local checkpoints, LoRA adapters, CPU or CUDA.

Safety defaults: only safetensors weights are loaded (pickled ``.bin`` files need
``allow_pickle``), and repository code never runs unless ``trust_remote_code``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quorumbench.backends._files import pinned_local, require
from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends._registry import resolve_bundled
from quorumbench.backends.local import LocalModel, load_local
from quorumbench.errors import Hint, InvalidRefError, MissingDependencyError, ModelLoadError
from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ModelBackend,
    ModelInfo,
    Progress,
    Prompt,
    no_progress,
)
from quorumbench.evaluation.refs import ModelRef, gguf_adapter_base, parse_ref

_HUB_PATTERNS = [
    "*.json",
    "*.safetensors",
    "tokenizer*",
    "*.model",
    "*.tiktoken",
    "*.txt",
    "*.jinja",
]


@dataclass(frozen=True)
class _Checkout:
    directory: Path
    ref: ModelRef
    revision: str


def _checkout(ref: ModelRef, options: BackendOptions) -> _Checkout:
    """A local directory holding ``ref`` at its pinned revision."""
    if ref.is_local:
        path, digest = pinned_local(ref.location, ref.revision, "dir")
        return _Checkout(path, ModelRef("hf", str(path), digest), digest)
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise MissingDependencyError("huggingface_hub", "hf") from exc
    patterns = list(_HUB_PATTERNS)
    if options.allow_pickle:
        patterns.append("*.bin")
    if options.trust_remote_code:
        patterns.append("*.py")
    try:
        local = snapshot_download(ref.location, revision=ref.revision, allow_patterns=patterns)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot download {ref.canonical()} ({type(exc).__name__}: {exc})"
        ) from exc
    assert ref.revision is not None
    return _Checkout(Path(local), ref, ref.revision)


def _adapter_base(checkout: _Checkout) -> ModelRef | None:
    """The pinned base model named by a LoRA adapter's ``adapter_config.json``."""
    config_path = checkout.directory / "adapter_config.json"
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{config_path} is not valid JSON: {exc}") from exc
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelLoadError(f"{config_path} does not name its base model")
    try:
        gguf_base = gguf_adapter_base(base, config.get("revision"))
    except InvalidRefError as exc:
        raise ModelLoadError(f"{config_path}: the adapter's base: {exc.message}") from exc
    if gguf_base is not None:
        return gguf_base
    if base.startswith(("/", "./", "../", "~")):
        return parse_ref(f"hf:{base}")
    revision = config.get("revision")
    if not isinstance(revision, str) or len(revision) != 40:
        raise ModelLoadError(
            f'the adapter\'s base {base!r} is not pinned: set "revision" in '
            f"{config_path.name} to the base model's 40-hex commit"
        )
    return parse_ref(f"hf:{base}@{revision}")


def _check_weights(directory: Path, options: BackendOptions) -> None:
    has_safetensors = any(directory.glob("*.safetensors"))
    has_pickle = any(directory.glob("*.bin")) or any(directory.glob("*.pt"))
    if not has_safetensors and has_pickle and not options.allow_pickle:
        raise ModelLoadError(
            f"{directory} only has pickled weights (.bin/.pt), which can run code when loaded",
            hint=Hint(
                "allow_pickle",
                "convert them to safetensors, or allow pickled weights if you trust them",
            ),
        )
    if not has_safetensors and not has_pickle:
        raise ModelLoadError(f"{directory} holds no model weights (*.safetensors)")


def _device_and_dtype(options: BackendOptions) -> tuple[str, Any]:
    import torch

    device = options.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {device!r} was asked for, but no CUDA device is available",
            hint=Hint("device", "choose the cpu device (or auto)"),
        )
    if options.dtype == "auto":
        if device == "cpu":
            return device, torch.float32
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if options.dtype not in dtypes:
        raise ModelLoadError(f"unknown dtype {options.dtype!r}; use one of {', '.join(dtypes)}")
    return device, dtypes[options.dtype]


def fetch_hf(ref: ModelRef, options: BackendOptions) -> LocalModel:
    """The local files of an ``hf:`` ref (a checkout, or an adapter and its base)."""
    checkout = _checkout(ref, options)
    base_ref = _adapter_base(checkout)
    if base_ref is None:
        _check_weights(checkout.directory, options)
        return LocalModel("hf", checkout.ref, checkout.revision, checkout.directory)
    if base_ref.scheme in ("gguf", "bundled"):  # llama.cpp runs it, or the conversion
        from quorumbench.backends.gguf import fetch_gguf

        bundled = base_ref.scheme == "bundled"
        gguf = fetch_gguf(resolve_bundled(base_ref) if bundled else base_ref, options)
        pinned = base_ref.with_revision(gguf.revision) if bundled else gguf.ref
        return LocalModel(
            "hf",
            checkout.ref,
            checkout.revision,
            gguf.directory,
            adapter=checkout.directory,
            base_ref=pinned,
            gguf_file=gguf.gguf_file,
        )
    base = _checkout(base_ref, options)
    if _adapter_base(base) is not None:
        raise ModelLoadError("an adapter's base is itself an adapter; stacking is not supported")
    _check_weights(base.directory, options)
    return LocalModel(
        "hf",
        checkout.ref,
        checkout.revision,
        base.directory,
        adapter=checkout.directory,
        base_ref=base.ref,
    )


def load_hf_backend(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    """Load an ``hf:`` ref: a checkpoint, or a LoRA adapter on its pinned base."""
    require("torch", "transformers", extra="hf")
    return load_local(fetch_hf(ref, options), options)


def load_transformers_dir(
    directory: Path,
    ref: ModelRef,
    revision: str,
    options: BackendOptions,
    *,
    backend: str = "hf",
    adapter: tuple[Path, ModelRef] | None = None,
) -> TransformersBackend:
    """Load a transformers checkpoint directory (plus an optional adapter)."""
    require("torch", "transformers", extra="hf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # callers show their own progress
    _check_weights(directory, options)
    device, dtype = _device_and_dtype(options)
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            directory, trust_remote_code=options.trust_remote_code
        )
        model = AutoModelForCausalLM.from_pretrained(
            directory,
            dtype=dtype,
            use_safetensors=not options.allow_pickle or None,
            trust_remote_code=options.trust_remote_code,
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load {directory}: {type(exc).__name__}: {exc}") from exc
    details = {"path": str(directory)}
    if adapter is not None:
        model = _apply_adapter(model, adapter[0])
        details = {"adapter": str(adapter[0]), "base": adapter[1].canonical()}
    model.to(device).eval()
    info = ModelInfo(
        ref=ref.canonical(),
        backend=backend,
        revision=revision,
        is_chat=getattr(tokenizer, "chat_template", None) is not None,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        details=details,
    )
    return TransformersBackend(model, tokenizer, info)


def _apply_adapter(model: Any, adapter_dir: Path) -> Any:
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise MissingDependencyError("peft", "hf") from exc
    try:
        peft_model = PeftModel.from_pretrained(model, adapter_dir)
    except Exception as exc:
        raise ModelLoadError(f"cannot apply adapter {adapter_dir}: {exc}") from exc
    # Merging folds the low-rank update into the weights: same outputs, plain model.
    return peft_model.merge_and_unload()


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Tokens of (context, continuation) the way lm-evaluation-harness splits them.

    Trailing spaces of the context move to the continuation, the pair is encoded as
    one string and the continuation is what follows the context's own encoding; an
    empty context becomes the end-of-text token.
    """
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole: list[int] = tokenizer(context + continuation, add_special_tokens=False).input_ids
    if not context:
        return [tokenizer.eos_token_id], whole
    ctx: list[int] = tokenizer(context, add_special_tokens=False).input_ids
    return ctx, whole[len(ctx) :]


class TransformersBackend:
    """A loaded transformers model answering generation and choice requests."""

    def __init__(self, model: Any, tokenizer: Any, info: ModelInfo) -> None:
        from quorumbench.backends._lm import CausalLM

        self._tokenizer = tokenizer
        self._info = info
        eos = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
        max_length = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        self.lm = CausalLM(
            model,
            pad_token_id=pad,
            eos_token_ids=eos,
            max_length=max_length,
            decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        )

    @property
    def info(self) -> ModelInfo:
        return self._info

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False).input_ids)

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: plain text as is, messages through the chat template."""
        if prompt.text is not None:
            ids: list[int] = self._tokenizer(prompt.text, add_special_tokens=False).input_ids
            return ids
        if getattr(self._tokenizer, "chat_template", None) is None:
            raise ModelLoadError(f"{self._info.ref} has no chat template for a chat prompt")
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages or ()]
        text = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        ids = self._tokenizer(text, add_special_tokens=False).input_ids
        return ids

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]:
        from quorumbench.backends._lm import GenerationSpec

        prompts = [self.encode_prompt(r.prompt) for r in requests]
        specs = [
            GenerationSpec(r.stop, r.max_new_tokens, r.ignore_eos, r.cache_prefix) for r in requests
        ]
        outputs = self.lm.generate(prompts, specs, batch_size, on_done=lambda _: progress(1))
        return [GenerateResult(o.text, len(o.tokens), o.finish_reason) for o in outputs]

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]:
        pairs: list[tuple[list[int], list[int]]] = []
        owner: list[int] = []
        for index, request in enumerate(requests):
            for continuation in request.continuations:
                pairs.append(encode_pair(self._tokenizer, request.context, continuation))
                owner.append(index)
        remaining = [len(r.continuations) for r in requests]

        def done(pair: int) -> None:
            remaining[owner[pair]] -= 1
            if remaining[owner[pair]] == 0:
                progress(1)

        lls = self.lm.loglikelihoods(pairs, batch_size, on_done=done)
        results = []
        cursor = 0
        for request in requests:
            n = len(request.continuations)
            tokens = sum(len(cont) for _, cont in pairs[cursor : cursor + n])
            results.append(
                ChoiceResult("loglikelihood", tuple(lls[cursor : cursor + n]), n_tokens=tokens)
            )
            cursor += n
        return results

    def close(self) -> None:
        self.lm.clear_prefixes()


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, list):
        ids.update(i for i in config_eos if isinstance(i, int))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ModelLoadError("the model defines no end-of-sequence token")
    return ids
