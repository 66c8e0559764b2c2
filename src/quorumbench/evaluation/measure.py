"""Measure one evaluation: energy, CO₂, tokens, latency and peak memory
(docs/efficiency.md, "What the runner measures").

:class:`Measurer` is a context manager around the evaluation. While it is open, a
background thread samples every ``interval_s`` (50 ms): the process's resident memory
(``/proc/self/statm``) and the energy meter. Backends add what only they can time
through :mod:`quorumbench.evaluation.usage`. :meth:`Measurer.measurements` then gives
a :class:`~quorumbench.protocol.Measurements` in which every number says how it was
taken, and a reading that was not available is absent, never invented.

Energy, first that applies:

* ``nvml``: the model runs on an NVIDIA GPU and ``pynvml`` (``nvidia-ml-py``, the
  ``gpu`` extra) can read it: the GPU's energy counter when it has one, else its power
  sampled in the background and integrated (trapezoid rule). Scope ``gpu:N``.
* ``rapl``: Linux powercap counters (``/sys/class/powercap/intel-rapl:N/energy_uj``)
  are readable: the package domains summed, read at every sample so that wraparounds
  (at ``max_energy_range_uj``) are counted. Scope: the domains' names. The whole
  package, so other processes on the machine count too.
* ``estimate``: ``DEFAULT_CPU_WATTS_PER_CORE × cores`` as the CPU's TDP, times the
  evaluation's CPU utilisation (this process's CPU seconds, and a sandboxed worker's)
  over the wall time. Scope ``cpu``; on a GPU that cannot be read, the GPU is left
  out and the scope says so.
* ``none``: not even that (the core count is unknown): no energy, no CO₂.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from quorumbench.core.efficiency import (
    carbon_intensity,
    co2_grams,
    decode_rate,
    energy_from_counters,
    energy_from_power,
    estimate_energy_j,
    joules_to_kwh,
    median,
)
from quorumbench.evaluation.usage import BackendUsage, current_usage
from quorumbench.protocol import EnergyMethod, Measurements

POWERCAP_ROOT = Path("/sys/class/powercap")
SAMPLE_INTERVAL_S = 0.05
"""How often the background thread reads memory and the energy meter."""

DEFAULT_CPU_WATTS_PER_CORE = 5.0
"""The TDP share of one core assumed by the ``estimate`` method, in watts. A round
figure between the makers' published TDP per core of common server CPUs (AMD EPYC
7763: 280 W / 64 cores = 4.4 W; Intel Xeon Platinum 8380: 270 W / 40 cores = 6.75 W);
desktop and laptop parts are often higher per core. No table of CPU models is read:
the figure is an assumption, and results carry the method ``estimate``."""

_PACKAGE = re.compile(r"^intel-rapl:\d+$")


class EnergyMeter(Protocol):
    """Reads energy between :meth:`start` and :meth:`stop`."""

    method: EnergyMethod
    scope: str

    def start(self) -> None: ...

    def sample(self) -> None:
        """Called from the background thread every interval."""

    def stop(self) -> float | None:
        """Joules since :meth:`start`, or None if the meter failed meanwhile."""


# -- RAPL --------------------------------------------------------------------------


class RaplMeter:
    """Linux powercap package domains, summed; read at every sample (wraparound)."""

    method: EnergyMethod = "rapl"

    def __init__(self, domains: Sequence[Path]) -> None:
        self.domains = list(domains)
        self.scope = "+".join(_domain_name(d) for d in self.domains)
        self._ranges = [int((d / "max_energy_range_uj").read_text()) for d in self.domains]
        self._last: list[int] = []
        self._joules = 0.0
        self._lock = threading.Lock()
        self._failed = False

    @classmethod
    def find(cls, root: Path = POWERCAP_ROOT) -> RaplMeter | None:
        """A meter over the readable package domains under ``root``, or None."""
        try:
            domains = sorted(d for d in root.iterdir() if _PACKAGE.match(d.name))
        except OSError:
            return None
        readable = []
        for domain in domains:
            try:
                int((domain / "energy_uj").read_text())
                int((domain / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                continue
            readable.append(domain)
        return cls(readable) if readable else None

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self.domains]

    def start(self) -> None:
        self._last = self._read()

    def sample(self) -> None:
        with self._lock:
            if self._failed:
                return
            try:
                now = self._read()
                for start, end, top in zip(self._last, now, self._ranges, strict=True):
                    self._joules += energy_from_counters(start, end, top)
            except (OSError, ValueError):
                self._failed = True
                return
            self._last = now

    def stop(self) -> float | None:
        self.sample()
        return None if self._failed else self._joules


def _domain_name(domain: Path) -> str:
    try:
        return (domain / "name").read_text().strip() or domain.name
    except OSError:
        return domain.name


# -- NVML --------------------------------------------------------------------------


def load_nvml() -> Any | None:
    """``pynvml`` (``nvidia-ml-py``) when installed and initialised, else None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no device
        return None
    return pynvml


class NvmlMeter:
    """One NVIDIA GPU: its energy counter (mJ) when supported, else sampled power."""

    method: EnergyMethod = "nvml"

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.scope = f"gpu:{index}"
        self.handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index(index))
        self._counter_start: int | None = None
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._failed = False

    def _power(self) -> None:
        watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
        with self._lock:
            self._samples.append((time.perf_counter(), float(watts)))

    def start(self) -> None:
        try:
            self._counter_start = int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # NVMLError_NotSupported: older GPUs report power only
            self._counter_start = None
            self._power()

    def sample(self) -> None:
        if self._counter_start is not None or self._failed:
            return
        try:
            self._power()
        except Exception:
            self._failed = True

    def stop(self) -> float | None:
        try:
            if self._counter_start is not None:
                end = int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
                return max(0, end - self._counter_start) / 1000
            self._power()
        except Exception:
            return None
        with self._lock:
            samples = list(self._samples)
        if self._failed or len(samples) < 2:
            return None
        return energy_from_power(samples)


def gpu_index(device: str) -> int | None:
    """The CUDA device index of ``device`` ("cuda" → 0, "cuda:1" → 1), else None."""
    if device == "cuda":
        return 0
    match = re.fullmatch(r"cuda:(\d+)", device)
    return int(match.group(1)) if match else None


def nvml_index(cuda_index: int) -> int:
    """NVML's index of CUDA's device ``cuda_index``: NVML counts every GPU, CUDA only
    the ``CUDA_VISIBLE_DEVICES`` (when that lists indices)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


# -- memory ------------------------------------------------------------------------


def current_rss_bytes() -> int | None:
    """This process's resident memory now (``/proc/self/statm``), or None."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def lifetime_peak_rss_bytes() -> int | None:
    """``ru_maxrss``: the process's peak over its whole life (model loading included)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if peak <= 0:
        return None
    return peak if sys.platform == "darwin" else peak * 1024  # Linux: KiB


# -- the measurer ------------------------------------------------------------------


def _torch_cuda(device: str) -> Any | None:
    """``torch.cuda`` when the model runs on CUDA in this process: torch is imported and
    has started CUDA (a runner whose model is in a sandboxed worker never starts it here,
    which would cost GPU memory; the worker reports its own peak)."""
    torch = sys.modules.get("torch")
    if torch is None or gpu_index(device) is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_initialized() else None
    except Exception:
        return None


class Measurer:
    """Measures what happens between ``__enter__`` and ``__exit__``.

    ``device`` is where the model runs (``ModelInfo.device``); ``carbon_setting`` a
    country code or g CO₂/kWh (ValueError at once when it is neither); ``rapl_root``,
    ``nvml``, ``cores`` and ``rss`` replace the machine's own for tests; ``energy=False``
    reads no energy meter (a sandboxed worker: the runner reads it).
    """

    def __init__(
        self,
        device: str = "cpu",
        carbon_setting: str | None = None,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        rapl_root: Path = POWERCAP_ROOT,
        nvml: Callable[[], Any | None] = load_nvml,
        cores: int | None = None,
        watts_per_core: float = DEFAULT_CPU_WATTS_PER_CORE,
        rss: Callable[[], int | None] = current_rss_bytes,
        energy: bool = True,
    ) -> None:
        self.intensity, self.intensity_source = carbon_intensity(carbon_setting)
        self.device = device
        self.interval_s = interval_s
        self.cores = cores if cores is not None else os.cpu_count()
        self.watts_per_core = watts_per_core
        self._rss = rss
        self._cuda = _torch_cuda(device)
        self.meter = self._meter(rapl_root, nvml) if energy else None
        self.usage = BackendUsage()
        self.peak_rss: int | None = None
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.joules: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exit: contextlib.ExitStack | None = None

    def _meter(self, rapl_root: Path, nvml: Callable[[], Any | None]) -> EnergyMeter | None:
        index = gpu_index(self.device)
        if index is not None:
            module = nvml()
            if module is not None:
                with contextlib.suppress(Exception):
                    return NvmlMeter(module, index)
            return None  # a GPU nobody can read: a CPU meter would miss most of it
        return RaplMeter.find(rapl_root)

    # -- the block --

    def __enter__(self) -> Measurer:
        from quorumbench.evaluation.usage import recording_usage

        self._exit = contextlib.ExitStack()
        outer = current_usage()
        self.usage = self._exit.enter_context(recording_usage())
        if outer is not None:  # nested: report to the outer recorder too
            self._exit.callback(lambda: outer.merge(self.usage.to_json()))
        if self._cuda is not None:
            with contextlib.suppress(Exception):
                self._cuda.reset_peak_memory_stats()
        self._sample_rss()
        if self.meter is not None:
            try:
                self.meter.start()
            except Exception:
                self.meter = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="quorumbench-measure", daemon=True)
        self._cpu0 = time.process_time()
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = time.process_time() - self._cpu0
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample_rss()
        if self.meter is not None:
            try:
                self.joules = self.meter.stop()
            except Exception:
                self.joules = None
        if self._cuda is not None:
            with contextlib.suppress(Exception):
                peak = int(self._cuda.max_memory_allocated())
                self.usage.peak_gpu_bytes = max(peak, self.usage.peak_gpu_bytes or 0)
        if self._exit is not None:
            self._exit.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_rss()
            if self.meter is not None:
                self.meter.sample()

    def _sample_rss(self) -> None:
        now = self._rss()
        if now is not None:
            self.peak_rss = max(now, self.peak_rss or 0)

    # -- the result --

    def _energy(self) -> tuple[float | None, EnergyMethod, str | None]:
        if self.meter is not None and self.joules is not None:
            return self.joules, self.meter.method, self.meter.scope
        if self.cores is None or self.cores < 1:
            return None, "none", None
        cpu_s = self.cpu_s + self.usage.other_cpu_s
        tdp = self.watts_per_core * self.cores
        joules = estimate_energy_j(tdp, cpu_s, self.wall_s, self.cores)
        scope = "cpu" if gpu_index(self.device) is None else "cpu (the GPU is not measured)"
        return joules, "estimate", scope

    def peak_rss_bytes(self) -> int | None:
        """The peak of the process that holds the model: a sandboxed worker's when
        there is one, else this process's sampled peak (capped by ``ru_maxrss``, its
        lifetime peak, which sampling can never truly exceed)."""
        if self.usage.other_peak_rss_bytes is not None:
            return self.usage.other_peak_rss_bytes
        if self.peak_rss is None:
            return None
        lifetime = lifetime_peak_rss_bytes()
        return min(self.peak_rss, lifetime) if lifetime else self.peak_rss

    def usage_for_parent(self) -> dict[str, Any]:
        """What a sandboxed worker hands back (:meth:`BackendUsage.merge` input): its
        backend's usage, its CPU seconds and its memory peaks."""
        data = self.usage.to_json()
        data["other_cpu_s"] = self.cpu_s + self.usage.other_cpu_s
        data["other_peak_rss_bytes"] = self.peak_rss_bytes()
        return data

    def measurements(self, *, generated_tokens: int | None, sequences: int) -> Measurements:
        """What was measured, once the block has ended. ``generated_tokens`` are the
        backend's counts for a generation run (None for scoring), ``sequences`` how
        many were generated."""
        joules, method, scope = self._energy()
        fields: dict[str, Any] = {"wall_s": round(self.wall_s, 4), "energy_method": method}
        if joules is not None:
            kwh = joules_to_kwh(joules)
            fields |= {
                "energy_kwh": kwh,
                "energy_scope": scope,
                "carbon_intensity_g_per_kwh": self.intensity,
                "carbon_intensity_source": self.intensity_source,
                "co2_g": co2_grams(kwh, self.intensity),
            }
        usage = self.usage
        if usage.prompt_tokens is not None:
            fields["prompt_tokens"] = usage.prompt_tokens
        if generated_tokens is not None:
            fields["generated_tokens"] = generated_tokens
            if usage.ttft_s:
                fields["ttft_s"] = median(usage.ttft_s)
            if usage.decode_s is not None:
                rate = decode_rate(generated_tokens, sequences, 0.0, usage.decode_s)
                if rate is not None:
                    fields["decode_tokens_per_s"] = rate
        if (peak := self.peak_rss_bytes()) is not None:
            fields["peak_rss_bytes"] = peak
        if usage.peak_gpu_bytes is not None:
            fields["peak_gpu_bytes"] = usage.peak_gpu_bytes
        return Measurements(**fields)
