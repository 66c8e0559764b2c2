"""A real evaluation with SmolLM2-135M on this CPU is measured (docs/efficiency.md,
"What the runner measures"), and its measurements are signed with the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nacl.signing import VerifyKey

from quorumbench.benchmarks import load_benchmark
from quorumbench.core.canonical import canonical_json, sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.measure import RaplMeter
from quorumbench.protocol import ResultPayload, Task
from quorumbench.runner.keys import new_key
from quorumbench.runner.loop import result_payload

pytestmark = [pytest.mark.model, pytest.mark.data, pytest.mark.slow]

N = 2


@pytest.fixture(scope="module")
def runs(smollm2_backend, datasets_dir):
    context = BenchmarkContext(datasets_dir, max_new_tokens=24)
    found = {}
    for name in ("gsm8k", "truthfulqa-mc1"):
        bench = load_benchmark(name, context)
        config = EvalConfig(n=N, seed="measure", batch_size=2, carbon_intensity="350")
        found[name] = (bench, evaluate(bench, smollm2_backend, config))
    return found


def expected_method() -> str:
    return "rapl" if RaplMeter.find() is not None else "estimate"


def model_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.safetensors"))


def check_common(m, smollm2_dir: Path, runtime_s: float) -> None:
    assert m.energy_method == expected_method()
    assert m.energy_scope
    assert m.energy_kwh is not None and 0 < m.energy_kwh < 0.01  # seconds on two cores
    assert m.carbon_intensity_g_per_kwh == 350.0 and m.carbon_intensity_source == "setting"
    assert m.co2_g == pytest.approx(m.energy_kwh * 350)
    assert m.wall_s is not None and 0 < m.wall_s <= runtime_s + 0.01
    assert m.prompt_tokens is not None and m.prompt_tokens > 0
    assert m.peak_rss_bytes is not None and m.peak_rss_bytes > model_bytes(smollm2_dir)
    assert m.peak_gpu_bytes is None  # on the CPU


def test_a_generation_run_has_every_measurement(runs, smollm2_dir):
    _, result = runs["gsm8k"]
    m = result.measurements
    assert m is not None
    check_common(m, smollm2_dir, result.runtime_s)
    assert m.generated_tokens == result.tokens > N
    assert m.ttft_s is not None and 0 < m.ttft_s < m.wall_s
    assert m.decode_tokens_per_s is not None and 1 < m.decode_tokens_per_s < 10_000
    # decode alone is faster than the run's overall rate, which includes the prefills
    assert m.decode_tokens_per_s > result.tokens / result.runtime_s


def test_a_multiple_choice_run_has_no_generation_latency(runs, smollm2_dir):
    _, result = runs["truthfulqa-mc1"]
    m = result.measurements
    assert m is not None
    check_common(m, smollm2_dir, result.runtime_s)
    assert m.prompt_tokens >= result.tokens  # every option's tokens are read
    assert m.generated_tokens is None and m.ttft_s is None and m.decode_tokens_per_s is None


def test_the_result_file_and_hardware_profile_say_what_ran(runs):
    _, result = runs["gsm8k"]
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["measurements"]["energy_method"] == expected_method()
    hardware = doc["environment"]["hardware"]
    assert hardware["cpu_count"] >= 1
    if Path("/proc/cpuinfo").read_text().count("model name"):
        assert hardware["cpu_model"]


def task_for(bench, result) -> Task:
    return Task.model_validate(
        {
            "id": 11,
            "epoch": 1,
            "round": 1,
            "model": {"id": 1, "ref": result.model["ref"], "revision": result.model["revision"]},
            "benchmark": {
                "name": bench.name,
                "version": bench.version,
                "prompt_version": bench.prompt_version,
                "dataset_sha256": bench.dataset_sha256,
                "config": dict(bench.config),
            },
            "n_samples": N,
            "seed_commitment": "c" * 64,
            "sample_ids": [s.id for s in result.samples],
        }
    )


def test_the_signed_payload_carries_the_measurements_and_verifies(runs):
    bench, result = runs["gsm8k"]
    task = task_for(bench, result)
    payload = result_payload(task.id, result)
    assert payload.measurements == result.measurements
    key = new_key(Path("never-written.key"))
    signature = key.sign_result(task, 5, 1, payload)
    # what the server does: parse the body it got, hash it, check the signature
    received = ResultPayload.model_validate(json.loads(json.dumps(payload.model_dump(mode="json"))))
    assert received.measurements == payload.measurements
    message = message_for_task(task, 5, 1, result_digest(received), signature.signed_at)
    VerifyKey(bytes(key.signing_key.verify_key)).verify(message, bytes.fromhex(signature.value))
    # the measurements are signed: changing one changes the digest
    tampered = received.model_copy(
        update={"measurements": received.measurements.model_copy(update={"co2_g": 0.0})}
    )
    assert result_digest(tampered) != result_digest(received)


def test_a_payload_without_measurements_hashes_as_before(runs):
    bench, result = runs["truthfulqa-mc1"]
    payload = result_payload(11, result)
    body = payload.model_dump(mode="json")
    older = {k: v for k, v in body.items() if k != "measurements"}  # a 1.0 runner's body
    assert "measurements" in body and "measurements" not in older
    without = payload.model_copy(update={"measurements": None})
    assert "measurements" not in without.model_dump(mode="json")
    assert result_digest(without) == sha256_hex(canonical_json(older))
    assert result_digest(ResultPayload.model_validate(older)) == result_digest(without)
