"""Model backends: transformers (with LoRA and GGUF), OpenAI-compatible HTTP, a
scripted mock, and third-party plugins that own their own ref schemes."""

from quorumbench.backends._plugin import BackendFactory, BackendOptions, BackendPlugin
from quorumbench.backends._registry import (
    is_remote,
    load_backend,
    rebuild_registry,
    registry,
)
from quorumbench.backends._schemes import BackendRegistry, BackendStatus

__all__ = [
    "BackendFactory",
    "BackendOptions",
    "BackendPlugin",
    "BackendRegistry",
    "BackendStatus",
    "is_remote",
    "load_backend",
    "rebuild_registry",
    "registry",
]
