"""Model backends: transformers (with LoRA and GGUF) and OpenAI-compatible HTTP."""

from quorumbench.backends._registry import BackendOptions, load_backend, registry

__all__ = ["BackendOptions", "load_backend", "registry"]
