"""Hardware and library versions recorded with every run."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from quorumbench.evaluation.measure import gpu_index, load_nvml, nvml_index

_LIBRARIES = (
    "quorumbench",
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "gguf",
    "accelerate",
    "llama_cpp_python",
    "xllamacpp",
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


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name (the first ``model name`` line of /proc/cpuinfo), or None."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()[:200]
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_profile(device: str, nvml: Any | None = None) -> dict[str, Any]:
    """The GPU ``device`` names (``cuda:N``): name, total memory, driver and count from
    NVML when ``pynvml`` is installed, else from torch when this process has started
    CUDA; the CUDA version torch was built with. Empty for a CPU device; a field
    neither can tell is left out."""
    index = gpu_index(device)
    if index is None:
        return {}
    found: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        found["cuda_version"] = str(torch.version.cuda)
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is not None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index(index))
            found["gpu_name"] = _text(nvml.nvmlDeviceGetName(handle))
            found["gpu_memory_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            found["gpu_driver"] = _text(nvml.nvmlSystemGetDriverVersion())
            found["gpu_count"] = int(nvml.nvmlDeviceGetCount())
            return found
        except Exception:  # NVMLError: fall back to torch
            pass
    try:  # only where CUDA is running already: starting it costs GPU memory
        if torch is not None and torch.cuda.is_initialized():
            props = torch.cuda.get_device_properties(index)
            found["gpu_name"] = str(props.name)
            found["gpu_memory_bytes"] = int(props.total_memory)
            found["gpu_count"] = int(torch.cuda.device_count())
    except Exception:
        pass
    return found


def hardware(device: str = "cpu") -> dict[str, Any]:
    """The machine: OS, CPU (model, cores), memory, and the GPU the model ran on."""
    found: dict[str, Any] = {
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
    }
    if (model := cpu_model()) is not None:
        found["cpu_model"] = model
    return found | gpu_profile(device)
