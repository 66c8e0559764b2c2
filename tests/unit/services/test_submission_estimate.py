"""The cost estimate of a submission: pure arithmetic over measured rates."""

from __future__ import annotations

import pytest

from quorumbench.services.submissions.estimate import (
    BY_KIND,
    MEASURED,
    REFERENCE_PARAMS,
    BenchmarkLoad,
    describe,
    estimate_epoch,
    sample_cost,
)

LOADS = [BenchmarkLoad("arith", "generate", 5), BenchmarkLoad("truthfulqa-mc1", "choice", 5)]


def test_the_reference_model_costs_what_was_measured():
    cost = estimate_epoch(REFERENCE_PARAMS, LOADS, quorum=3)
    assert cost.samples == 10 and cost.quorum == 3
    arith, mc1 = cost.benchmarks
    assert arith.cpu_seconds == round(5 * MEASURED["arith"].cpu_s, 1)
    assert mc1.cpu_seconds == round(5 * MEASURED["truthfulqa-mc1"].cpu_s, 1)
    assert cost.cpu_seconds == pytest.approx(arith.cpu_seconds + mc1.cpu_seconds, abs=0.11)
    assert cost.gpu_seconds < cost.cpu_seconds


def test_the_cpu_part_scales_with_the_parameters_and_the_gpu_part_has_a_floor():
    small = estimate_epoch(1_000_000_000, LOADS, quorum=3)
    large = estimate_epoch(7_000_000_000, LOADS, quorum=3)
    assert large.cpu_seconds == pytest.approx(7 * small.cpu_seconds, rel=0.01)
    assert small.gpu_seconds < large.gpu_seconds < 7 * small.gpu_seconds
    tiny = estimate_epoch(1, LOADS, quorum=3)
    assert tiny.cpu_seconds == 0 and tiny.gpu_seconds > 0  # launches cost whatever the size


def test_an_unmeasured_benchmark_costs_what_its_kind_does():
    custom = BenchmarkLoad("my-spec", "choice", 4)
    assert sample_cost(custom) == BY_KIND["choice"]
    assert sample_cost(BenchmarkLoad("other", "odd-kind", 1)) == BY_KIND["generate"]


def test_the_sentence_says_it_is_an_estimate():
    cost = estimate_epoch(1_700_000_000, LOADS, quorum=3)
    text = describe(cost)
    assert "estimate" in text and "reference CPU" in text and "reference GPU" in text
    assert "1,700,000,000 parameters" in text and "3 runners" in text
    assert "an estimate, not a measurement" in cost.method
