"""The built-in backends, declared as a plugin declares its own.

Each factory imports its module only when called, so reading these declarations
imports neither torch nor httpx.
"""

from __future__ import annotations

from quorumbench.backends._plugin import BackendOptions, BackendPlugin
from quorumbench.errors import ConfigError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef


def _load_hf(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    from quorumbench.backends.hf import load_hf_backend

    if options.engine not in ("transformers", "llamacpp", "auto"):
        raise ConfigError(f"unknown engine {options.engine!r} (transformers or llamacpp)")
    # llamacpp: a LoRA adapter on a GGUF file; anything else is refused once fetched
    # (``backends/local.py``, ``on_llama_cpp``, which also settles ``auto``)
    return load_hf_backend(ref, options)


def _load_gguf(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    from quorumbench.backends._llama_lib import installed
    from quorumbench.backends._registry import resolve_bundled

    if ref.scheme == "bundled":  # a file shipped in a Python package: a local gguf ref
        ref = resolve_bundled(ref)
    if options.engine == "llamacpp" or (options.engine == "auto" and installed()):
        from quorumbench.backends.llamacpp import load_llamacpp_backend

        return load_llamacpp_backend(ref, options)
    if options.engine not in ("transformers", "auto"):
        raise ConfigError(f"unknown engine {options.engine!r} (transformers or llamacpp)")
    from quorumbench.backends.gguf import load_gguf_backend

    return load_gguf_backend(ref, options)


def _load_openai(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    from quorumbench.backends.openai_compat import load_openai_backend

    return load_openai_backend(ref, options)


def _load_mock(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    from quorumbench.backends.mock import load_mock_backend

    return load_mock_backend(ref, options)


HF = BackendPlugin(schemes=("hf",), load=_load_hf)
GGUF = BackendPlugin(schemes=("gguf", "bundled"), load=_load_gguf)
OPENAI_COMPAT = BackendPlugin(schemes=("openai",), load=_load_openai, remote=True)
MOCK = BackendPlugin(schemes=("mock",), load=_load_mock)

BUILTINS = {
    "hf": "quorumbench.backends._builtins:HF",
    "gguf": "quorumbench.backends._builtins:GGUF",
    "openai-compat": "quorumbench.backends._builtins:OPENAI_COMPAT",
    "mock": "quorumbench.backends._builtins:MOCK",
}
"""Built-in backend names → their declarations (``module:attribute``)."""
