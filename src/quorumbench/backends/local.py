"""Fetch a model's files first (network allowed), load them later (offline).

Loading an ``hf:``, ``gguf:`` or ``bundled:`` model is two steps. :func:`fetch_model`
resolves the ref to files on this machine: it downloads a pinned Hub checkout or
GGUF file into the Hugging Face cache, hashes local paths against their pins and
refuses pickled weights unless they are allowed. :func:`load_local` then loads those
files without touching the network. The runner fetches in its own process and loads
inside a sandbox with no network (``runner/sandbox.py``); ``quorumbench eval`` does
both in process.

A :class:`LocalModel` travels to the sandbox as JSON (:meth:`LocalModel.to_json`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from quorumbench.backends import _llama_lib
from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends._registry import resolve_bundled
from quorumbench.errors import ConfigError, ModelLoadError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef, parse_ref

MARKER = "quorumbench-converted"
"""File a finished GGUF conversion leaves in its directory."""


@dataclass(frozen=True)
class LocalModel:
    """A model's files on this machine and what to record about them."""

    backend: Literal["hf", "gguf"]
    ref: ModelRef
    """The pinned ref recorded in results."""
    revision: str
    directory: Path
    """The transformers checkpoint (a LoRA adapter's base; a GGUF file's conversion)."""
    adapter: Path | None = None
    """A LoRA adapter applied on ``directory``."""
    base_ref: ModelRef | None = None
    """The adapter's pinned base."""
    gguf_file: Path | None = None
    """The GGUF file ``directory`` is (or will be) converted from."""

    @property
    def gguf_digest(self) -> str:
        """The SHA-256 of ``gguf_file``, which names its conversion's directory
        (``<cache>/gguf/<sha256>``): the revision of a GGUF model, not of an adapter on one."""
        return self.directory.name

    @property
    def converted(self) -> bool:
        """False for a GGUF file whose conversion is not in the cache yet."""
        return self.gguf_file is None or (self.directory / MARKER).is_file()

    def paths(self, *, converted: bool = True) -> tuple[Path, ...]:
        """Every file or directory loading reads (a sandbox binds these read-only);
        without the conversion of a GGUF file when ``converted`` is false (llama.cpp
        reads the file itself)."""
        found = [self.directory] if converted and self.converted else []
        found += [p for p in (self.adapter, self.gguf_file) if p is not None]
        return tuple(_with_link_targets(found))

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "ref": self.ref.canonical(),
            "revision": self.revision,
            "directory": str(self.directory),
            "adapter": None if self.adapter is None else str(self.adapter),
            "base_ref": None if self.base_ref is None else self.base_ref.canonical(),
            "gguf_file": None if self.gguf_file is None else str(self.gguf_file),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalModel:
        def path(key: str) -> Path | None:
            return None if data.get(key) is None else Path(str(data[key]))

        backend = str(data["backend"])
        if backend not in ("hf", "gguf"):
            raise ModelLoadError(f"unknown local model backend {backend!r}")
        base = data.get("base_ref")
        return cls(
            backend="hf" if backend == "hf" else "gguf",
            ref=parse_ref(str(data["ref"])),
            revision=str(data["revision"]),
            directory=Path(str(data["directory"])),
            adapter=path("adapter"),
            base_ref=None if base is None else parse_ref(str(base)),
            gguf_file=path("gguf_file"),
        )


def _with_link_targets(paths: list[Path]) -> list[Path]:
    """``paths`` plus the directories their symlinks point into (the Hub cache keeps
    a snapshot's files as links into the repository's ``blobs/``)."""
    out: list[Path] = []
    for path in paths:
        out.append(path)
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_symlink()]
        for link in files:
            target = Path(os.path.realpath(link))
            if not target.is_relative_to(path) and target.parent not in out:
                out.append(target if target.is_dir() else target.parent)
    return out


def sandboxable(ref: str | ModelRef) -> bool:
    """Whether ``ref``'s model is files fetched here (hf, gguf, bundled): the only models
    a sandbox can load. ``openai:`` endpoints run elsewhere; ``mock:`` and a plugin's
    schemes load through their own backend (``backends.is_remote`` says if that runs
    model code here)."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    return parsed.scheme in ("hf", "gguf", "bundled")


def fetch_model(ref: str | ModelRef, options: BackendOptions) -> LocalModel:
    """The files of ``ref`` on this machine, downloaded first when they are on the Hub."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed.scheme == "bundled":
        parsed = resolve_bundled(parsed)
    if parsed.scheme == "hf":
        from quorumbench.backends.hf import fetch_hf

        return fetch_hf(parsed, options)
    if parsed.scheme == "gguf":
        from quorumbench.backends.gguf import fetch_gguf

        return fetch_gguf(parsed, options)
    raise ModelLoadError(
        f"{parsed.canonical()} has no files to fetch: only hf:, gguf: and bundled: models "
        "are loaded from files"
    )


def on_llama_cpp(model: LocalModel, options: BackendOptions) -> bool:
    """Whether ``model`` runs on llama.cpp: a GGUF file (or a LoRA adapter on one), and
    the llama.cpp engine (``auto``: when it is installed)."""
    if options.engine == "auto":
        return model.gguf_file is not None and _llama_lib.installed()
    if options.engine != "llamacpp":
        return False
    if model.gguf_file is None:
        raise ConfigError(
            f"{model.ref.canonical()} runs on transformers; the llamacpp engine runs GGUF "
            "files (gguf: and bundled: refs) and LoRA adapters on them"
        )
    return True


def load_local(model: LocalModel, options: BackendOptions) -> ModelBackend:
    """Load fetched files (converting a GGUF file first if needed, unless llama.cpp runs
    it); no network."""
    from quorumbench.backends.gguf import converted_dir
    from quorumbench.backends.hf import load_transformers_dir

    if on_llama_cpp(model, options):
        from quorumbench.backends.llamacpp import LlamaCppBackend

        assert model.gguf_file is not None
        if model.adapter is None:
            return LlamaCppBackend.load(
                model.gguf_file, model.ref, model.revision, threads=options.threads
            )
        return _llama_cpp_with_adapter(model, options)

    directory = model.directory
    if not model.converted:
        assert model.gguf_file is not None
        directory = converted_dir(model.gguf_file, model.gguf_digest, directory.parent.parent)
    adapter = None
    if model.adapter is not None:
        assert model.base_ref is not None
        adapter = (model.adapter, model.base_ref)
    return load_transformers_dir(
        directory, model.ref, model.revision, options, backend=model.backend, adapter=adapter
    )


def _llama_cpp_with_adapter(model: LocalModel, options: BackendOptions) -> ModelBackend:
    """The GGUF base on llama.cpp with the PEFT adapter converted to llama.cpp's LoRA
    format (``backends/gguf_lora.py``: about 2.5 s for the bundled base, most of it
    reading the base's header); llama.cpp reads the converted file when loading, so it
    lives in a temporary directory until then."""
    from quorumbench.backends.gguf_lora import peft_to_gguf_lora
    from quorumbench.backends.llamacpp import LlamaCppBackend

    assert model.gguf_file is not None and model.adapter is not None
    with tempfile.TemporaryDirectory(prefix="lora-") as scratch:
        lora = Path(scratch) / "adapter.gguf"
        peft_to_gguf_lora(model.adapter, model.gguf_file, lora)
        base = "" if model.base_ref is None else model.base_ref.canonical()
        return LlamaCppBackend.load(
            model.gguf_file,
            model.ref,
            model.revision,
            threads=options.threads,
            lora=lora,
            details={"adapter": str(model.adapter), "base": base},
        )
