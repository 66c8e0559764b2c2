"""Model backends: transformers (with LoRA and GGUF), llama.cpp (GGUF), OpenAI-compatible
HTTP, a scripted mock, and third-party plugins that own their own ref schemes."""

import importlib.util

from quorumbench.backends._plugin import BackendFactory, BackendOptions, BackendPlugin
from quorumbench.backends._registry import (
    is_remote,
    load_backend,
    rebuild_registry,
    registry,
)
from quorumbench.backends._schemes import BackendRegistry, BackendStatus
from quorumbench.protocol import Engine


def available_engines() -> tuple[Engine, ...]:
    """The engine families this machine can evaluate with (protocol 1.3): transformers
    when torch and transformers are installed, llama.cpp when the pinned xllamacpp is,
    and always an endpoint."""
    from quorumbench.backends import _llama_lib

    found: list[Engine] = []
    if all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers")):
        found.append("transformers")
    if _llama_lib.installed():
        found.append("llamacpp")
    found.append("endpoint")
    return tuple(found)


_ENGINE_OF: dict[str, Engine] = {
    "hf": "transformers",
    "gguf": "transformers",
    "llamacpp": "llamacpp",
    "openai-compat": "endpoint",
}


def engine_of(backend: str | None) -> Engine | None:
    """The engine family of a loaded model's ``ModelInfo.backend`` (None: a plugin's)."""
    return _ENGINE_OF.get(backend or "")


__all__ = [
    "BackendFactory",
    "BackendOptions",
    "BackendPlugin",
    "BackendRegistry",
    "BackendStatus",
    "available_engines",
    "engine_of",
    "is_remote",
    "load_backend",
    "rebuild_registry",
    "registry",
]
