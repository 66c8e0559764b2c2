"""Hardware and library versions recorded with every run."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

_LIBRARIES = (
    "quorumbench",
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "gguf",
    "accelerate",
    "llama_cpp_python",
    "httpx",
    "numpy",
)


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that can change a result."""
    found = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def hardware() -> dict[str, Any]:
    """The machine: OS, CPU, core count, memory."""
    return {
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
    }
