"""What a backend is to the registry: its options, its factory and the schemes it owns.

A backend plugin is a distribution with an entry point in the ``quorumbench.backends``
group whose target is a :class:`BackendPlugin`::

    # pyproject.toml of quorumbench-vllm
    [project.entry-points."quorumbench.backends"]
    vllm = "quorumbench_vllm:BACKEND"

    # quorumbench_vllm/__init__.py (keep it light: import vllm inside the factory)
    BACKEND = BackendPlugin(schemes=("vllm",), load=load_vllm_backend)

The built-in backends are declared the same way (``backends/_builtins.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.refs import ModelRef


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
    engine: str = "transformers"
    """What runs a GGUF file (``gguf:`` and ``bundled:`` refs) or a LoRA adapter on one:
    ``transformers`` (de-quantized, ``backends/gguf.py``), ``llamacpp`` (the file as it
    is, ``backends/llamacpp.py``), or ``auto``: llamacpp where the pinned xllamacpp is
    installed, as runners evaluate such models for the board, else transformers."""


BackendFactory = Callable[[ModelRef, BackendOptions], ModelBackend]
"""Loads the model a parsed ref names; raises a ``QuorumError`` saying why it cannot."""


@dataclass(frozen=True)
class BackendPlugin:
    """A backend: the ref schemes it owns and the factory that loads their models.

    Attributes:
        schemes: The ref schemes it owns, lowercase (``("vllm",)``): a ref
            ``vllm:<location>@<revision>`` is loaded by ``load``. A scheme that a
            built-in backend or another plugin owns is refused, and shown as this
            plugin's error.
        load: The factory. It receives the parsed ref (``location`` and ``revision``
            as written after the scheme) and imports heavy packages itself, so that
            listing plugins stays cheap.
        remote: True when the model runs elsewhere and this machine only sends it
            requests (an HTTP endpoint). False, the default: loading runs model code
            here, so a runner with a sandbox refuses to load it in its own process.
    """

    schemes: tuple[str, ...]
    load: BackendFactory
    remote: bool = False
