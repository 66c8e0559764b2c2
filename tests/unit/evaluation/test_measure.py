"""The runner's measurements (evaluation/measure.py): fake powercap trees, a fake NVML
module, the RSS sampler and what backends report."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import pytest

from quorumbench.core.efficiency import WORLD_AVERAGE_G_PER_KWH
from quorumbench.evaluation import measure
from quorumbench.evaluation.measure import Measurer, RaplMeter, nvml_index
from quorumbench.evaluation.usage import BackendUsage, current_usage, recording_usage

SLOW = 60.0  # a sampling interval no test waits for: the meters are read at start and end


def domain(root: Path, name: str, label: str, energy: int, top: int) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(f"{label}\n")
    (path / "energy_uj").write_text(f"{energy}\n")
    (path / "max_energy_range_uj").write_text(f"{top}\n")
    return path


def set_energy(path: Path, energy: int) -> None:
    (path / "energy_uj").write_text(f"{energy}\n")


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


# -- RAPL ---------------------------------------------------------------------------


def test_rapl_sums_the_package_domains_and_counts_a_wraparound(tmp_path):
    top = 1_000_000_000
    package0 = domain(tmp_path, "intel-rapl:0", "package-0", top - 1_000_000, top)
    package1 = domain(tmp_path, "intel-rapl:1", "package-1", 5_000_000, top)
    core = domain(tmp_path, "intel-rapl:0:0", "core", 0, top)  # a subdomain: not summed
    with Measurer(rapl_root=tmp_path, interval_s=SLOW, carbon_setting="350") as measurer:
        set_energy(package0, 500_000)  # wrapped: 1 J to the top, then 0.5 J
        set_energy(package1, 7_000_000)  # 2 J
        set_energy(core, 900_000_000)
    m = measurer.measurements(generated_tokens=None, sequences=0)
    assert (m.energy_method, m.energy_scope) == ("rapl", "package-0+package-1")
    assert m.energy_kwh == pytest.approx(3.5 / 3.6e6)
    assert (m.carbon_intensity_g_per_kwh, m.carbon_intensity_source) == (350.0, "setting")
    assert m.co2_g == pytest.approx(3.5 / 3.6e6 * 350)


def test_rapl_read_at_every_sample_counts_more_than_one_wrap(tmp_path):
    top = 1_000
    package = domain(tmp_path, "intel-rapl:0", "package-0", 900, top)
    meter = RaplMeter.find(tmp_path)
    assert meter is not None
    meter.start()
    for value in (100, 950, 200, 300):  # wraps twice
        set_energy(package, value)
        meter.sample()
    # 900 → 100: 100 + 100 (wrapped); → 950: 850; → 200: 50 + 200 (wrapped); → 300: 100
    assert meter.stop() == pytest.approx((200 + 850 + 250 + 100) / 1e6)


def test_unreadable_rapl_falls_back_to_the_estimate(tmp_path):
    package = tmp_path / "intel-rapl:0"
    (package / "energy_uj").mkdir(parents=True)  # reading it fails, even as root
    (package / "max_energy_range_uj").write_text("1000\n")
    assert RaplMeter.find(tmp_path) is None
    assert RaplMeter.find(tmp_path / "absent") is None
    with Measurer(rapl_root=tmp_path, cores=2, watts_per_core=5.0, interval_s=SLOW) as measurer:
        burn(0.2)
    m = measurer.measurements(generated_tokens=None, sequences=0)
    assert (m.energy_method, m.energy_scope) == ("estimate", "cpu")
    # 10 W for 2 cores × utilisation (cpu_s / 2 cores / wall) × wall = 5 W × cpu_s
    assert m.energy_kwh * 3.6e6 == pytest.approx(5.0 * measurer.cpu_s)
    assert measurer.cpu_s >= 0.2
    assert m.carbon_intensity_source == "world-average"
    assert m.carbon_intensity_g_per_kwh == WORLD_AVERAGE_G_PER_KWH


def test_rapl_that_fails_during_the_run_is_not_reported_as_rapl(tmp_path):
    package = domain(tmp_path, "intel-rapl:0", "package-0", 10, 1_000)
    with Measurer(rapl_root=tmp_path, cores=1, interval_s=SLOW) as measurer:
        (package / "energy_uj").unlink()
    assert measurer.measurements(generated_tokens=None, sequences=0).energy_method == "estimate"


def test_without_a_core_count_there_is_no_energy_and_no_co2(tmp_path):
    with Measurer(rapl_root=tmp_path, cores=0, interval_s=SLOW) as measurer:
        pass
    m = measurer.measurements(generated_tokens=None, sequences=0)
    assert m.energy_method == "none"
    dumped = m.model_dump()
    for absent in ("energy_kwh", "energy_scope", "co2_g", "carbon_intensity_g_per_kwh"):
        assert absent not in dumped
    assert m.wall_s is not None and m.wall_s >= 0


def test_a_bad_carbon_setting_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="unknown carbon intensity"):
        Measurer(carbon_setting="Atlantis")


# -- NVML ---------------------------------------------------------------------------


class NotSupported(Exception):
    pass


def fake_nvml(*, counter: bool, watts: float = 100.0) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    state = {"mj": 1_000_000, "index": None}

    def handle(index):
        state["index"] = index
        return f"gpu{index}"

    def energy(handle):
        if not counter:
            raise NotSupported("energy counter")
        state["mj"] += 2_500  # 2.5 J per reading
        return state["mj"]

    module.nvmlInit = lambda: None
    module.nvmlDeviceGetHandleByIndex = handle
    module.nvmlDeviceGetTotalEnergyConsumption = energy
    module.nvmlDeviceGetPowerUsage = lambda handle: int(watts * 1000)  # milliwatts
    module.state = state
    return module


def test_nvml_reads_the_gpus_energy_counter(monkeypatch, tmp_path):
    module = fake_nvml(counter=True)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with Measurer("cuda:1", rapl_root=tmp_path, interval_s=SLOW) as measurer:
        pass
    m = measurer.measurements(generated_tokens=None, sequences=0)
    assert (m.energy_method, m.energy_scope) == ("nvml", "gpu:1")
    assert m.energy_kwh == pytest.approx(2.5 / 3.6e6)
    assert module.state["index"] == 5  # CUDA's device 1 is NVML's 5


def test_nvml_without_a_counter_integrates_sampled_power(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(counter=False, watts=100.0))
    with Measurer("cuda", rapl_root=tmp_path, interval_s=0.01) as measurer:
        time.sleep(0.2)
    m = measurer.measurements(generated_tokens=None, sequences=0)
    assert (m.energy_method, m.energy_scope) == ("nvml", "gpu:0")
    joules = m.energy_kwh * 3.6e6
    assert 100 * 0.15 < joules <= 100 * (measurer.wall_s + 0.05)  # 100 W over ~the run


def test_a_gpu_nothing_can_read_gets_a_cpu_estimate_that_says_so(tmp_path):
    with Measurer("cuda:0", nvml=lambda: None, rapl_root=tmp_path, interval_s=SLOW) as m:
        pass
    measured = m.measurements(generated_tokens=None, sequences=0)
    assert measured.energy_method == "estimate"
    assert measured.energy_scope == "cpu (the GPU is not measured)"


def test_pynvml_missing_means_no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert measure.load_nvml() is None


def test_nvml_index_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_index(2) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,GPU-def")
    assert nvml_index(1) == 1  # UUIDs: nothing to map
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    assert nvml_index(0) == 4


# -- memory -------------------------------------------------------------------------


def test_the_rss_sampler_keeps_the_high_water_mark(tmp_path):
    readings = iter([100, 300, 900, 200])
    lock = threading.Lock()
    read_all = threading.Event()

    def rss():
        with lock:
            value = next(readings, None)
            if value is None:
                read_all.set()
                return 150
            return value

    with Measurer(rapl_root=tmp_path, rss=rss, interval_s=0.005) as measurer:
        assert read_all.wait(30)  # however busy the machine, the sampler got to each
    assert measurer.peak_rss == 900


def test_the_real_peak_includes_memory_freed_before_the_end(tmp_path):
    before = measure.current_rss_bytes()
    assert before is not None
    with Measurer(rapl_root=tmp_path, interval_s=0.01) as measurer:
        block = bytearray(200 * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
        time.sleep(0.1)
        del block
    peak = measurer.measurements(generated_tokens=None, sequences=0).peak_rss_bytes
    assert peak is not None and peak > before + 150 * 2**20
    lifetime = measure.lifetime_peak_rss_bytes()
    assert lifetime is not None and peak <= lifetime


# -- what backends report -----------------------------------------------------------


def test_backend_timings_give_ttft_and_decode_rate(tmp_path):
    assert current_usage() is None
    with Measurer(rapl_root=tmp_path, interval_s=SLOW) as measurer:
        usage = current_usage()
        assert usage is not None
        for ttft in (0.2, 0.4, 0.3):
            usage.add_first_token(ttft)
        usage.add_decode(1.5)
        usage.add_decode(0.5)
        usage.add_prompt_tokens(120)
    assert current_usage() is None
    m = measurer.measurements(generated_tokens=43, sequences=3)
    assert m.ttft_s == pytest.approx(0.3)
    assert m.decode_tokens_per_s == pytest.approx((43 - 3) / 2.0)
    assert (m.prompt_tokens, m.generated_tokens) == (120, 43)


def test_a_backend_that_times_nothing_leaves_latency_absent(tmp_path):
    with Measurer(rapl_root=tmp_path, interval_s=SLOW) as measurer:
        pass
    m = measurer.measurements(generated_tokens=10, sequences=2).model_dump()
    assert m["generated_tokens"] == 10
    for absent in ("ttft_s", "decode_tokens_per_s", "prompt_tokens", "peak_gpu_bytes"):
        assert absent not in m


def test_a_sandboxed_workers_figures_are_merged():
    with recording_usage() as usage:
        usage.add_first_token(0.1)
        usage.merge(
            {
                "prompt_tokens": 50,
                "ttft_s": [0.3],
                "decode_s": 2.0,
                "other_cpu_s": 4.0,
                "other_peak_rss_bytes": 2_000,
                "peak_gpu_bytes": 7,
            }
        )
    assert usage == BackendUsage(50, [0.1, 0.3], 2.0, 4.0, 2_000, 7)
    for bad in ({"ttft_s": [-1]}, {"prompt_tokens": "many"}, {"other_peak_rss_bytes": True}):
        with pytest.raises(ValueError):
            BackendUsage().merge(bad)


def test_the_worker_side_hands_back_its_cpu_and_memory(tmp_path):
    with Measurer(energy=False, rss=lambda: 4096, interval_s=SLOW) as measurer:
        current_usage().add_first_token(0.25)
        burn(0.05)
    figures = measurer.usage_for_parent()
    assert figures["ttft_s"] == [0.25]
    assert figures["other_cpu_s"] >= 0.05
    assert figures["other_peak_rss_bytes"] == 4096
    with Measurer(rapl_root=tmp_path, cores=1, rss=lambda: 1024, interval_s=SLOW) as parent:
        time.sleep(0.1)  # while the worker computes, this process waits
        current_usage().merge(figures)
    m = parent.measurements(generated_tokens=None, sequences=0)
    assert m.peak_rss_bytes == 4096  # the worker holds the model
    assert m.energy_kwh * 3.6e6 >= measure.DEFAULT_CPU_WATTS_PER_CORE * 0.05  # its CPU counts


def test_a_nested_measurement_reports_to_the_outer_one(tmp_path):
    outer = Measurer(rapl_root=tmp_path, interval_s=SLOW)
    with outer, Measurer(rapl_root=tmp_path, interval_s=SLOW):
        current_usage().add_first_token(0.5)
    assert outer.usage.ttft_s == [0.5]


def fake_torch(initialized: bool) -> types.ModuleType:
    cuda = types.SimpleNamespace(calls=[])
    cuda.is_initialized = lambda: initialized
    cuda.reset_peak_memory_stats = lambda: cuda.calls.append("reset")
    cuda.max_memory_allocated = lambda: cuda.calls.append("peak") or 123_456
    module = types.ModuleType("torch")
    module.cuda = cuda
    return module


def test_the_gpu_peak_is_torchs_after_a_reset(monkeypatch, tmp_path):
    torch = fake_torch(initialized=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    with Measurer("cuda:0", nvml=lambda: None, rapl_root=tmp_path, interval_s=SLOW) as m:
        pass
    assert torch.cuda.calls == ["reset", "peak"]
    assert m.measurements(generated_tokens=None, sequences=0).peak_gpu_bytes == 123_456


def test_cuda_is_not_started_here_for_a_model_that_lives_elsewhere(monkeypatch, tmp_path):
    torch = fake_torch(initialized=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    with Measurer("cuda:0", nvml=lambda: None, rapl_root=tmp_path, interval_s=SLOW) as m:
        pass
    assert torch.cuda.calls == []
    assert m.measurements(generated_tokens=None, sequences=0).peak_gpu_bytes is None
