"""What a model is, detected from its ref at registration, without loading weights.

:func:`inspect_model` pins the ref (a Hub branch or tag → its commit, a local path
→ its content hash, ``bundled:`` → its local GGUF file) and reads the metadata
the registry stores: parameter count (from safetensors headers or the GGUF tensor
table), architecture, context length, dtype, quantization, license, lineage and a
hash of the weights alone for duplicate detection. ``openai:`` refs make no call.

``weights_sha256`` is the SHA-256 over sorted ``"<file name>\0<file sha256>\n"``
lines, one per top-level ``*.safetensors`` file (or ``*.bin`` when there is none);
on the Hub the file hashes are the LFS SHA-256s, so a local copy of a Hub
checkpoint hashes the same. For a GGUF file it is the file's own SHA-256.

A LoRA adapter's ``params`` are its own; registration also reads its base's parameter
count, the same header-only way, into ``details["base_params"]``, so its size as it
runs (:func:`model_size`: base + adapter) is known.

Nothing of a model's weights is downloaded or written to disk: Hub access goes through
the small :class:`HubClient` protocol, which lists a repo and reads byte ranges
(configs and cards whole, safetensors and GGUF files only as far as their headers;
services/_hub.py); any failure there becomes a :class:`RegistrationError` that says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from quorumbench.backends._files import file_sha256, pinned_local
from quorumbench.backends._registry import BUNDLED, resolve_bundled
from quorumbench.backends.gguf_lora import ARCHITECTURES
from quorumbench.backends.local import MARKER
from quorumbench.errors import InvalidRefError, ModelLoadError, RegistrationError
from quorumbench.evaluation.refs import BUILTIN_SCHEMES, ModelRef, gguf_adapter_base, parse_ref
from quorumbench.services._gguf_meta import GGUFInfo, read_gguf, read_gguf_header
from quorumbench.services._hub import (
    HfHubClient,
    HubCheckout,
    HubClient,
    HubFile,
    HubRepo,
)
from quorumbench.services._safetensors_meta import (
    card_hints,
    front_matter,
    majority_dtype,
    parameter_counts,
    read_json,
    weight_files,
    weights_digest,
)

__all__ = [
    "HfHubClient",
    "HubClient",
    "HubFile",
    "HubRepo",
    "ModelMetadata",
    "ModelSize",
    "inspect_model",
    "model_size",
]

_GGUF_FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
"""Unquantized GGUF file types and their dtype; quantized files have dtype ``None``."""
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelMetadata:
    """What registration records about a model (never its weights)."""

    ref: ModelRef
    """The immutable, pinned ref (revision filled in)."""
    name: str
    """Display name: repo name, file stem (or GGUF ``general.name``), endpoint model; a
    bundled model's file name (:func:`bundled_name`)."""
    params: int | None
    architecture: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    license: str | None
    base_ref: str | None
    """An adapter's pinned base (canonical ref); otherwise an unpinned ``hf:owner/name``
    lineage hint from the model card or GGUF header, or ``None``."""
    weights_sha256: str | None
    """SHA-256 of the weights alone (see the module docstring), for duplicate detection."""
    details: dict[str, Any] = field(default_factory=dict)
    family: str | None = None
    """The architecture family: a checkpoint's ``model_type`` (``llama``, ``qwen2``), a
    GGUF file's ``general.architecture``; ``None`` for adapters and endpoints."""


@dataclass(frozen=True)
class ModelSize:
    """A model's size as the pages and the API show it (:func:`model_size`)."""

    effective_params: int | None
    """The parameters the model runs with: for a LoRA adapter its base's plus its own
    (``None`` when the base's count is unknown); for any other model its ``params``."""
    adapter_params: int | None = None
    """An adapter's own parameters; ``None`` for a model that is not an adapter."""
    base_params: int | None = None
    """An adapter's base's parameters, when known; ``None`` for other models."""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_size(params: int | None, details: Mapping[str, Any] | None) -> ModelSize:
    """The size of a registered model from its ``params`` and ``details`` (an adapter
    is marked ``kind: adapter`` and carries ``base_params`` since registration reads
    them; an adapter registered before that has an unknown effective size)."""
    details = details or {}
    if details.get("kind") != "adapter":
        return ModelSize(params)
    base = _count(details.get("base_params"))
    effective = params + base if params is not None and base is not None else None
    return ModelSize(effective, params, base)


def _pinned(location: str, revision: str | None, kind: Literal["file", "dir"]) -> tuple[Path, str]:
    try:
        return pinned_local(location, revision, kind)
    except ModelLoadError as exc:  # the content no longer matches the pinned hash
        raise RegistrationError(exc.message, check="ref-mismatch") from exc


def _checkpoint_meta(
    ref: ModelRef,
    name: str,
    config: Mapping[str, Any],
    counts: Mapping[str, int],
    card: Mapping[str, Any],
    weights_sha256: str,
    details: dict[str, Any],
) -> ModelMetadata:
    """Metadata of a transformers checkpoint from its config, header counts and card."""
    text_config = config.get("text_config")
    sources = [config, text_config] if isinstance(text_config, Mapping) else [config]
    contexts = [s.get(k) for s in sources for k in _CONTEXT_KEYS]
    context = next((int(v) for v in contexts if isinstance(v, int) and v > 0), None)
    architectures = config.get("architectures")
    arch = architectures[0] if isinstance(architectures, list) and architectures else None
    declared = config.get("torch_dtype") or config.get("dtype")
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    license_, base_hint = card_hints(card)
    for key in ("model_type", "vocab_size", "num_hidden_layers", "hidden_size"):
        if isinstance(config.get(key), str | int):
            details[key] = config[key]
    auto_map = config.get("auto_map")
    if auto_map:  # classes from the repository's own Python files (trust_remote_code)
        details["auto_map"] = sorted(auto_map) if isinstance(auto_map, Mapping) else auto_map
    details["dtypes"] = dict(counts)
    model_type = config.get("model_type")
    return ModelMetadata(
        ref=ref,
        name=name,
        params=sum(counts.values()) or None,
        architecture=str(arch) if arch else None,
        context_length=context,
        dtype=majority_dtype(counts) or (declared if isinstance(declared, str) else None),
        quantization=str(method) if method else None,
        license=license_,
        base_ref=base_hint,
        weights_sha256=weights_sha256,
        details=details,
        family=model_type if isinstance(model_type, str) and model_type else None,
    )


def _adapter_meta(
    ref: ModelRef,
    name: str,
    config: Mapping[str, Any],
    counts: Mapping[str, int],
    card: Mapping[str, Any],
    weights_sha256: str,
    base: _Base,
    details: dict[str, Any],
) -> ModelMetadata:
    """Metadata of a PEFT adapter on its pinned ``base``."""
    base_ref = base.ref
    targets = config.get("target_modules")
    details.update(
        kind="adapter",
        r=config.get("r"),
        lora_alpha=config.get("lora_alpha"),
        target_modules=sorted(targets) if isinstance(targets, list) else targets,
        task_type=config.get("task_type"),
        dtypes=dict(counts),
    )
    if base.params is not None:
        details["base_params"] = base.params
    else:
        details["base_params_unknown"] = base.unknown
    converted_from = _converted_gguf(base_ref)
    if converted_from is not None:
        details["base_gguf_sha256"] = converted_from
    peft_type = config.get("peft_type")
    return ModelMetadata(
        ref=ref,
        name=name,
        params=sum(counts.values()) or None,
        architecture=peft_type.lower() if isinstance(peft_type, str) else "lora",
        context_length=None,
        dtype=majority_dtype(counts),
        quantization=None,
        license=card_hints(card)[0],
        base_ref=base_ref,
        weights_sha256=weights_sha256,
        details=details,
    )


def _converted_gguf(base_ref: str) -> str | None:
    """The SHA-256 of the GGUF file a local base directory was converted from, when it
    is one of our conversions (which name it in their marker file): the adapter was
    made on that GGUF model, registered here by that hash (``weights_sha256``)."""
    ref = parse_ref(base_ref)
    if not ref.is_local:
        return None
    marker = Path(ref.location) / MARKER
    lines = marker.read_text(encoding="utf-8").split("\n") if marker.is_file() else []
    digest = lines[1].strip() if len(lines) > 1 else ""
    return digest if _SHA256.fullmatch(digest) else None


class _Base(NamedTuple):
    """An adapter's base: its canonical pinned ref and its parameter count."""

    ref: str
    params: int | None
    unknown: str = ""
    """Why ``params`` is ``None``."""


def _counted(counts: Mapping[str, int], where: str) -> _Base:
    total = sum(counts.values())
    if total:
        return _Base(where, total)
    return _Base(where, None, "the base has no safetensors weights whose headers give its size")


def _local_safetensors(path: Path, weights: list[str]) -> list[Path]:
    """The safetensors files of a local checkpoint (its index's shards, if it has one)."""
    files = [path / w for w in weights if w.endswith(".safetensors")]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if isinstance(weight_map, dict):
            files = [path / str(f) for f in sorted(set(weight_map.values()))]
    return files


def _hub_counts(hub: HubCheckout, weights: list[str]) -> dict[str, int]:
    """Parameters per dtype of a Hub checkpoint from its safetensors headers (ranged
    reads; the index's shards, if it has one)."""
    names = [w for w in weights if w.endswith(".safetensors")]
    index = "model.safetensors.index.json"
    if index in hub.files:
        weight_map = hub.small_json(index).get("weight_map")
        if isinstance(weight_map, dict):
            names = sorted({str(f) for f in weight_map.values()})
    missing = [n for n in names if n not in hub.files]
    if missing:
        raise RegistrationError(
            f"{hub.repo_id}@{hub.sha} has no file {missing[0]} (its index names it)",
            check="weights-missing",
        )
    return parameter_counts(hub.source(n) for n in names)


def _adapter_base(config: Mapping[str, Any], hub: HubClient | None, allow_local: bool) -> _Base:
    """The canonical pinned ref of an adapter's base model, and its parameter count
    read from its safetensors headers."""
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise RegistrationError(
            "the adapter's adapter_config.json does not name its base model",
            check="base-not-pinned",
        )
    gguf_base = _gguf_base(config, base, hub, allow_local)
    if gguf_base is not None:
        return gguf_base
    if base.startswith(("/", "./", "../", "~")):
        if not allow_local:
            raise RegistrationError(
                f"a Hub adapter's base must be a Hub repo, not {base!r}", check="base-not-pinned"
            )
        try:
            path, digest = _pinned(base, None, "dir")
        except InvalidRefError as exc:
            raise RegistrationError(
                f"the adapter's base is missing: {exc.message}", check="base-missing"
            ) from exc
        if (path / "adapter_config.json").is_file():
            raise RegistrationError(
                f"the adapter's base {path} is itself an adapter", check="base-is-adapter"
            )
        weights = weight_files(p.name for p in path.iterdir() if p.is_file())
        counts = parameter_counts(_local_safetensors(path, weights))
        return _counted(counts, ModelRef("hf", str(path), digest).canonical())
    revision = config.get("revision")
    try:
        pinned = parse_ref(f"hf:{base}@{revision}") if isinstance(revision, str) else None
    except InvalidRefError:
        pinned = None
    if pinned is None:
        raise RegistrationError(
            f'the adapter\'s base {base!r} is not pinned: set "revision" in '
            "adapter_config.json to the base model's 40-hex commit",
            check="base-not-pinned",
        )
    if hub is not None:
        return _hub_base(hub, pinned)
    with HfHubClient() as client:
        return _hub_base(client, pinned)


def _gguf_base(
    config: Mapping[str, Any], base: str, hub: HubClient | None, allow_local: bool
) -> _Base | None:
    """An adapter's GGUF base (``bundled:``, ``gguf:``; llama.cpp runs the adapter on
    it), pinned and read as a registration of that file reads it; None for another base."""
    try:
        ref = gguf_adapter_base(base, config.get("revision"))
    except InvalidRefError as exc:
        raise RegistrationError(
            f"the adapter's base: {exc.message}", check="base-not-pinned"
        ) from exc
    if ref is None:
        return None
    if ref.is_local and not allow_local:
        raise RegistrationError(
            f"a Hub adapter's base must be on the Hub or bundled, not {base!r}",
            check="base-not-pinned",
        )
    try:
        meta = inspect_model(ref.canonical(), hub=hub)
    except (InvalidRefError, RegistrationError) as exc:
        raise RegistrationError(
            f"the adapter's base cannot be read: {exc.message}", check="base-unreachable"
        ) from exc
    if meta.architecture not in ARCHITECTURES:  # runners could never load it
        raise RegistrationError(
            f"the adapter's base {meta.ref.canonical()} is a GGUF file of architecture "
            f"{meta.architecture!r}; adapters on GGUF files run on llama.cpp for "
            f"{', '.join(sorted(ARCHITECTURES))}: name the base's transformers checkpoint "
            "instead",
            check="base-unsupported",
        )
    return _Base(meta.ref.canonical(), meta.params)


def _hub_base(client: HubClient, pinned: ModelRef) -> _Base:
    try:
        found = HubCheckout(client, pinned)
    except RegistrationError as exc:
        raise RegistrationError(
            f"the adapter's base cannot be read: {exc.message}", check="base-unreachable"
        ) from exc
    if "adapter_config.json" in found.files:
        raise RegistrationError(
            f"the adapter's base {pinned} is itself an adapter", check="base-is-adapter"
        )
    return _counted(_hub_counts(found, weight_files(found.files)), pinned.canonical())


def _local_hf(ref: ModelRef, hub: HubClient | None) -> ModelMetadata:
    path, digest = _pinned(ref.location, ref.revision, "dir")
    pinned = ModelRef("hf", str(path), digest)
    weights = weight_files(p.name for p in path.iterdir() if p.is_file())
    if not weights:
        raise RegistrationError(
            f"{path} holds no model weights (*.safetensors or *.bin)", check="weights-missing"
        )
    safetensors = _local_safetensors(path, weights)
    counts = parameter_counts(safetensors)
    weights_sha = weights_digest((w, file_sha256(path / w)) for w in weights)
    readme = path / "README.md"
    card = (
        front_matter(readme.read_text(encoding="utf-8", errors="replace"))
        if readme.is_file()
        else {}
    )
    details: dict[str, Any] = {"kind": "checkpoint", "source": "local", "files": weights}
    if not safetensors:
        details["params_unknown"] = "only pickled *.bin weights; their headers are not read"
        details["weights_bytes"] = sum((path / w).stat().st_size for w in weights)
    if (path / "adapter_config.json").is_file():
        config = read_json(path / "adapter_config.json")
        base = _adapter_base(config, hub, allow_local=True)
        return _adapter_meta(pinned, path.name, config, counts, card, weights_sha, base, details)
    if not (path / "config.json").is_file():
        raise RegistrationError(
            f"{path} has no config.json; it is not a transformers checkpoint",
            check="config-missing",
        )
    config = read_json(path / "config.json")
    return _checkpoint_meta(pinned, path.name, config, counts, card, weights_sha, details)


def _gguf_meta(
    ref: ModelRef, info: GGUFInfo, sha256: str, details: dict[str, Any]
) -> ModelMetadata:
    split = info.details.get("split_count")
    if split:
        raise RegistrationError(
            f"{ref.canonical()} is one part of a GGUF model split into {split} files; "
            "split GGUF models are not supported (a runner loads one file)",
            check="gguf-split",
        )
    details.update(info.details)
    return ModelMetadata(
        ref=ref,
        name=info.name or Path(ref.filename or ref.location).stem,
        params=info.params,
        architecture=info.architecture,
        context_length=info.context_length,
        dtype=_GGUF_FLOAT_TYPES.get(info.file_type or ""),
        quantization=info.file_type,
        license=info.license,
        base_ref=info.base_model,
        weights_sha256=sha256,
        details=details,
        family=info.architecture,
    )


def _hub_hf(ref: ModelRef, client: HubClient) -> ModelMetadata:
    hub = HubCheckout(client, ref)
    pinned = ModelRef("hf", ref.location, hub.sha)
    name = ref.location.rpartition("/")[2]
    weights = weight_files(hub.files)
    if not weights:
        raise RegistrationError(
            f"{pinned} holds no model weights (*.safetensors or *.bin)", check="weights-missing"
        )
    weights_sha = weights_digest((w, hub.sha256(w)) for w in weights)
    details: dict[str, Any] = {"kind": "checkpoint", "source": "hub", "files": weights}
    if not any(w.endswith(".safetensors") for w in weights):
        details["params_unknown"] = "only pickled *.bin weights; their headers are not read"
        details["weights_bytes"] = sum(hub.files[w].size or 0 for w in weights)
    if "adapter_config.json" in hub.files:
        config = hub.small_json("adapter_config.json")
        base = _adapter_base(config, client, allow_local=False)
        counts = _hub_counts(hub, weights)
        return _adapter_meta(pinned, name, config, counts, hub.card(), weights_sha, base, details)
    if "config.json" not in hub.files:
        raise RegistrationError(
            f"{pinned} has no config.json; for a GGUF file use gguf:{ref.location}/<file>.gguf",
            check="config-missing",
        )
    config = hub.small_json("config.json")
    counts = _hub_counts(hub, weights)
    return _checkpoint_meta(pinned, name, config, counts, hub.card(), weights_sha, details)


def _hub_gguf(ref: ModelRef, client: HubClient) -> ModelMetadata:
    """A Hub GGUF file's metadata from its header, read by ranged requests (a few MB of
    the file, whatever its size)."""
    assert ref.filename is not None
    hub = HubCheckout(client, ref)
    pinned = ModelRef("gguf", ref.location, hub.sha, filename=ref.filename)
    file = hub.files.get(ref.filename)
    if file is None:
        raise RegistrationError(
            f"{ref.location} has no file {ref.filename} at {hub.sha}", check="weights-missing"
        )
    details: dict[str, Any] = {"kind": "gguf", "source": "hub", "file": file.name}
    info = read_gguf_header(hub.source(file.name))
    meta = _gguf_meta(pinned, info, hub.sha256(file.name), details)
    license_, base_hint = card_hints(hub.card())
    return replace(meta, license=meta.license or license_, base_ref=meta.base_ref or base_hint)


def _local_gguf(ref: ModelRef, details: dict[str, Any]) -> ModelMetadata:
    path, digest = _pinned(ref.location, ref.revision, "file")
    return _gguf_meta(ModelRef("gguf", str(path), digest), read_gguf(path), digest, details)


def bundled_name(name: str) -> str:
    """The display name of a bundled model: its file's name up to the first dot, as its
    publisher wrote it (``SmolLM2-135M-Instruct.Q4_1.gguf`` → ``SmolLM2-135M-Instruct``).
    The GGUF header's ``general.name`` is the converter's guess from the training run
    (``Smollm2 135M 8k Lc100K Mix1 Ep2``), not the model's name."""
    return BUNDLED[name][1].split(".", 1)[0]


def inspect_model(ref_text: str, *, hub: HubClient | None = None) -> ModelMetadata:
    """Pin ``ref_text`` and read the model's metadata without loading its weights.

    Nothing of the weights is downloaded or written to disk: local files are read as
    far as their headers, Hub files through ranged requests (see the module docstring).

    Args:
        ref_text: A model ref; Hub refs may name a branch or tag, or no revision.
        hub: The Hub client; ``None``: an :class:`HfHubClient` for this call.

    Returns:
        The metadata, with ``ref`` pinned to a commit or content hash.

    Raises:
        InvalidRefError: The ref cannot be parsed, or a local path does not exist.
        RegistrationError: The model cannot be inspected (Hub unreachable, files
            missing or malformed, a header that cannot be read, an adapter's base not
            pinned, a scheme of ``mock:`` or of a backend plugin, whose models the
            server cannot read…), with the reason.
        MissingDependencyError: ``huggingface_hub`` is needed (to list a Hub repo) but
            missing.
    """
    ref = parse_ref(ref_text, allow_moving=True)
    if ref.scheme not in BUILTIN_SCHEMES:
        raise RegistrationError(
            f"the server cannot inspect {ref.scheme}: models (a backend plugin's or the "
            "mock's scheme); it registers hf:, gguf:, bundled: and openai: models",
            check="scheme-unsupported",
        )
    if ref.scheme == "openai":
        details = {"kind": "endpoint", "endpoint": ref.location}
        name = ref.model_name or ref.location
        return ModelMetadata(ref, name, None, None, None, None, None, None, None, None, details)
    if ref.scheme == "bundled":
        # Stored as bundled:<name>@<file sha256>, not as this machine's file path: every
        # runner finds the file in its own installed package and checks the hash.
        details = {"kind": "gguf", "source": "bundled", "bundled": ref.location}
        meta = _local_gguf(resolve_bundled(ref), details)
        return replace(
            meta,
            ref=ModelRef("bundled", ref.location, meta.ref.revision),
            name=bundled_name(ref.location),
        )
    if ref.is_local and ref.scheme == "gguf":
        return _local_gguf(ref, {"kind": "gguf", "source": "local"})
    if ref.is_local:
        return _local_hf(ref, hub)
    if hub is not None:
        return _hub_gguf(ref, hub) if ref.scheme == "gguf" else _hub_hf(ref, hub)
    with HfHubClient() as client:
        return _hub_gguf(ref, client) if ref.scheme == "gguf" else _hub_hf(ref, client)
