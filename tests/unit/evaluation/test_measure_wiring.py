"""Measurements wired through: the engine, the result file, the sandboxed worker and
the hardware profile."""

from __future__ import annotations

import types

import pytest

from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.errors import ConfigError
from quorumbench.evaluation import environment
from quorumbench.evaluation.backend import GenerateRequest, ModelInfo, Prompt
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.usage import current_usage, recording_usage
from quorumbench.protocol import Machine
from quorumbench.runner import protocol as wire
from quorumbench.runner.sandbox_worker import _Worker
from quorumbench.runner.worker import SandboxedBackend


@pytest.fixture(scope="module")
def arith():
    return ArithBenchmark(BenchmarkContext(shots=1))


class TimedMock(MockBackend):
    """A mock that reports timings the way the transformers backend does."""

    def generate(self, requests, *, batch_size, progress=lambda _: None):
        usage = current_usage()
        if usage is not None:
            for _ in requests:
                usage.add_first_token(0.02)
                usage.add_prompt_tokens(10)
            usage.add_decode(0.5)
        return super().generate(requests, batch_size=batch_size, progress=progress)


def test_a_run_carries_its_measurements_into_the_result_file(arith):
    backend = TimedMock(lambda _: "#### 3 and some more words", is_chat=False)
    result = evaluate(arith, backend, EvalConfig(n=2, carbon_intensity="GB"))
    m = result.measurements
    assert m is not None
    assert m.energy_method in ("rapl", "estimate")
    assert m.carbon_intensity_source == "country:GB"
    assert (m.prompt_tokens, m.generated_tokens) == (20, result.tokens)
    assert m.ttft_s == pytest.approx(0.02)
    assert m.decode_tokens_per_s == pytest.approx((result.tokens - 2) / 0.5)
    assert m.wall_s is not None and m.wall_s <= result.runtime_s + 1e-3
    doc = result.to_json()
    assert doc["measurements"] == m.model_dump(mode="json")
    assert "ttft_s" in doc["measurements"] and "peak_gpu_bytes" not in doc["measurements"]


def test_a_run_not_measured_has_no_measurements_key(arith):
    result = evaluate(arith, MockBackend(lambda _: "#### 3"), EvalConfig(n=1, measure=False))
    assert result.measurements is None
    assert "measurements" not in result.to_json()


def test_measuring_does_not_change_what_is_computed(arith):
    backend = MockBackend(lambda p: f"#### {len(p) % 7}", is_chat=False)
    measured = evaluate(arith, backend, EvalConfig(n=4, seed="s"))
    plain = evaluate(arith, backend, EvalConfig(n=4, seed="s", measure=False))
    assert measured.predictions_sha256 == plain.predictions_sha256
    assert measured.outputs_sha256 == plain.outputs_sha256


def test_a_backend_that_times_nothing_gives_no_latency(arith):
    result = evaluate(arith, MockBackend(lambda _: "#### 1 2 3"), EvalConfig(n=1))
    m = result.measurements
    assert m is not None and m.generated_tokens == result.tokens
    assert m.ttft_s is None and m.decode_tokens_per_s is None and m.prompt_tokens is None


def test_a_bad_carbon_intensity_is_a_config_error(arith):
    with pytest.raises(ConfigError, match="unknown carbon intensity"):
        evaluate(arith, MockBackend(), EvalConfig(n=1, carbon_intensity="nowhere"))


# -- the sandboxed path -------------------------------------------------------------


class FakeChannel:
    def progress(self, n):
        pass


def test_the_worker_measures_an_operation_when_asked_and_hands_it_back():
    worker = _Worker(FakeChannel())
    worker.backend = TimedMock(lambda _: "one two three", is_chat=False)
    request = GenerateRequest(Prompt(text="q"), max_new_tokens=8)
    message = {"requests": [wire.encode_generate(request)], "batch_size": 1}
    worker.generate(message)
    assert worker.take_usage({}) == {}, "not asked: nothing measured"
    worker.generate({**message, "measure": True})
    figures = worker.take_usage({})
    assert figures["ttft_s"] == [0.02] and figures["prompt_tokens"] == 10
    assert figures["other_cpu_s"] >= 0 and figures["other_peak_rss_bytes"] > 0
    assert worker.take_usage({}) == {}, "handed back once"


class FakeWorker:
    def __init__(self, figures):
        self.figures = figures
        self.sent = []

    def call(self, message, watch=None, progress=None):
        self.sent.append(message)
        if message["op"] == "usage":
            return self.figures
        return [wire.encode_generate_result(r) for r in self.results(message)]

    def results(self, message):
        from quorumbench.evaluation.backend import GenerateResult

        return [GenerateResult("x", 1, "eos") for _ in message["requests"]]


def test_the_sandboxed_backend_adds_the_workers_figures_to_the_measurement():
    figures = {"ttft_s": [0.4], "decode_s": 1.0, "other_cpu_s": 2.0, "other_peak_rss_bytes": 9}
    fake = FakeWorker(figures)
    backend = SandboxedBackend(fake, ModelInfo("hf:x", "hf", "0" * 64, False))
    request = GenerateRequest(Prompt(text="q"))
    backend.generate([request], batch_size=1)
    assert [m["op"] for m in fake.sent] == ["generate"] and "measure" not in fake.sent[0]
    with recording_usage() as usage:
        backend.generate([request], batch_size=1)
    assert [m["op"] for m in fake.sent[1:]] == ["generate", "usage"]
    assert fake.sent[1]["measure"] is True
    assert usage.ttft_s == [0.4] and usage.other_cpu_s == 2.0
    assert usage.other_peak_rss_bytes == 9


def test_bad_figures_from_a_worker_are_dropped_not_invented(caplog):
    fake = FakeWorker({"ttft_s": ["soon"]})
    backend = SandboxedBackend(fake, ModelInfo("hf:x", "hf", "0" * 64, False))
    with recording_usage() as usage:
        backend.generate([GenerateRequest(Prompt(text="q"))], batch_size=1)
    assert usage.ttft_s == []
    assert "unusable" in caplog.text


# -- the hardware profile -----------------------------------------------------------


def test_the_cpu_model_comes_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert environment.cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert environment.cpu_model(tmp_path / "absent") is None
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    assert environment.cpu_model(tmp_path / "arm") is None


def test_the_gpu_profile_comes_from_nvml():
    nvml = types.SimpleNamespace(
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=85_520_809_984),
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlDeviceGetCount=lambda: 1,
    )
    found = environment.gpu_profile("cuda:0", nvml)
    assert {k: v for k, v in found.items() if k != "cuda_version"} == {
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_memory_bytes": 85_520_809_984,
        "gpu_driver": "550.54.15",
        "gpu_count": 1,
    }
    assert environment.gpu_profile("cpu", nvml) == {}


def test_the_hardware_profile_is_a_protocol_machine():
    machine = Machine.model_validate(environment.hardware())
    assert machine.cpu_count and machine.gpu_name is None
