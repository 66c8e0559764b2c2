"""GGUF models: converted once through transformers' GGUF loader, then cached.

transformers de-quantizes a GGUF file into a normal model; converting takes tens of
seconds, so the result is saved as safetensors under
``<cache>/gguf/<file sha256>/`` and later loads read that directory (a fraction of a
second). The recorded revision is the SHA-256 of the GGUF file itself.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quorumbench.backends._files import default_cache_dir, file_sha256, pinned_local, require
from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends.local import MARKER, LocalModel, load_local
from quorumbench.errors import MissingDependencyError, ModelLoadError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef


def locate_gguf(ref: ModelRef, options: BackendOptions) -> tuple[Path, str]:
    """The local GGUF file of ``ref`` and its SHA-256 (downloading a pinned Hub file)."""
    if ref.is_local:
        return pinned_local(ref.location, ref.revision, "file")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise MissingDependencyError("huggingface_hub", "hf") from exc
    try:
        local = hf_hub_download(ref.location, ref.filename or "", revision=ref.revision)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot download {ref.canonical()} ({type(exc).__name__}: {exc})"
        ) from exc
    path = Path(local)
    return path, file_sha256(path)


def converted_dir(gguf_path: Path, digest: str, cache_dir: Path | None) -> Path:
    """A transformers directory converted from ``gguf_path``; converts on first use."""
    require("torch", "transformers", "gguf", extra="gguf")
    with conversion_slot(digest, cache_dir) as staging:
        if staging is not None:
            convert_into(gguf_path, digest, staging)
    return (cache_dir or default_cache_dir()) / "gguf" / digest


@contextmanager
def conversion_slot(digest: str, cache_dir: Path | None) -> Iterator[Path | None]:
    """Under the cache's lock: ``None`` when ``digest`` is converted already, else an
    empty staging directory that becomes the conversion if it holds the marker when
    the block ends (and is removed otherwise)."""
    from filelock import FileLock

    root = (cache_dir or default_cache_dir()) / "gguf"
    target = root / digest
    if (target / MARKER).is_file():
        yield None
        return
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{digest}.lock")):
        if (target / MARKER).is_file():
            yield None
            return
        staging = Path(tempfile.mkdtemp(prefix=f"{digest[:12]}-", dir=root))
        try:
            yield staging
            if (staging / MARKER).is_file():
                if target.exists():
                    shutil.rmtree(target)
                staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)


def convert_into(gguf_path: Path, digest: str, out: Path) -> None:
    """De-quantize ``gguf_path`` into the empty directory ``out`` and mark it done."""
    require("torch", "transformers", "gguf", extra="gguf")
    _convert(gguf_path, out)
    (out / MARKER).write_text(f"{gguf_path.name}\n{digest}\n", encoding="utf-8")


def _convert(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
            )
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot load {gguf_path}: {exc}") from exc
    # The de-quantized weights are ordinary tensors; drop the GGUF quantizer so the
    # model saves as plain safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


_PARSING = threading.Lock()


@contextmanager
def _parsed_once() -> Iterator[None]:
    """Within a conversion, gguf parses each file once and builds each name map once.

    transformers reads the whole file three times (for the tokenizer, the config and
    the weights: about 5 s each for SmolLM2's 49,152-token vocabulary, its arrays
    parsed value by value) and builds gguf's tensor-name map again for each of the
    model's 397 modules (7 s). Both are pure reads of the same file: the converted
    files are byte for byte the same (checked on 2026-12-07), in 13 s instead of 25.
    transformers imports both names from ``gguf`` inside its functions, so replacing
    them on the module for the conversion's duration is what it calls. The swap is
    process-wide and the conversions of one process take turns (``_PARSING``), so a
    swap never nests. The one other reader through these names, ``gguf_lora.py``, gets
    a cached reader of the same file or the same name map meanwhile: the same values.
    """
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    @functools.cache
    def parsed(path: object, mode: str = "r") -> object:
        return reader(path, mode)

    with _PARSING:
        gguf.GGUFReader = parsed
        gguf.get_tensor_name_map = functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def fetch_gguf(ref: ModelRef, options: BackendOptions) -> LocalModel:
    """The GGUF file of ``ref`` (downloaded when on the Hub) and where its conversion
    lives in the cache, ``<cache>/gguf/<file sha256>`` (made on first load)."""
    path, digest = locate_gguf(ref, options)
    pinned = ref if ref.revision else ref.with_revision(digest)
    if ref.is_local:
        pinned = ModelRef("gguf", str(path), digest)
    directory = (options.cache_dir or default_cache_dir()) / "gguf" / digest
    return LocalModel("gguf", pinned, digest, directory, gguf_file=path)


def load_gguf_backend(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    """Load a GGUF model through transformers (de-quantized, converted once)."""
    return load_local(fetch_gguf(ref, options), options)
