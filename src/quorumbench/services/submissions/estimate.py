"""An estimate of what one epoch of a model's tasks costs a runner: pure arithmetic.

A new model gets one task per active benchmark each epoch; every runner that takes
one evaluates all of its samples. The estimate is

    seconds = Σ over active benchmarks of samples_per_task × seconds per sample,

where seconds per sample come from measurements of the reference model on the
reference machines (:data:`MEASURED`, per benchmark; :data:`BY_KIND` for any other
benchmark, by its kind), scaled to the model's size:

* on the reference CPU, in proportion to the parameters (float32 inference on a CPU
  reads every weight for every token: memory-bound, so linear in size);
* on the reference GPU, a fixed part per sample (one kernel launch per layer and
  operation, whatever the size: it dominates small models) plus a part per billion
  parameters (the weights read per token), both fitted to measurements of several
  sizes.

How the constants were measured (``benchmarks/submission_cost.py``; docs/submitting.md
has the numbers): on the CPU, quorumbench's engine ran the bundled model as a runner
does (warm, tasks of 5 samples, batch size 8), the median over 5 tasks per benchmark;
the machine's 2 cores were shared with other jobs (load average 2 to 5), so the CPU
figures are likely pessimistic, perhaps twofold. The GPU had no copy of the model: the
same shapes of work (a batch of 5 prompts of 300 tokens generating 64 tokens; the same
prompts scored with 4 options each in one forward pass) ran through random-weight
models of 135M, 1.7B, 6.7B and 14.8B parameters there, and on the reference CPU at
135M; a benchmark's GPU constants are its CPU seconds per sample times the GPU fit
(fixed + per billion) over the synthetic CPU figure of its kind.

It ignores what it cannot know: how long the model's answers are (a model that
rambles until the token limit costs more), the runner's batch size and threads, the
download of the weights, and deeper tiers (a pair whose interval overlaps a
neighbour's gets 25 or 100 samples later: ``QB_DEPTH_TIERS``). docs/submitting.md says
how the constants were measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quorumbench.services.submissions.report import BenchmarkCost, CostEstimate

REFERENCE_PARAMS = 134_515_008
"""SmolLM2-135M-Instruct (``bundled:smollm2-135m-instruct``), the measured model."""
REFERENCE_CPU = "2 shared cores of an AMD EPYC server, float32 (PyTorch 2.13 CPU build)"
REFERENCE_GPU = "one NVIDIA H200, bfloat16 (PyTorch 2.11, CUDA 13)"


@dataclass(frozen=True)
class SampleCost:
    """Seconds one sample costs on the reference machines."""

    cpu_s: float
    """The reference model on the reference CPU; scales with the parameters."""
    gpu_fixed_s: float
    """On the reference GPU, whatever the size."""
    gpu_s_per_bparam: float
    """On the reference GPU, per billion parameters, on top of the fixed part."""

    def cpu(self, params: int) -> float:
        return self.cpu_s * params / REFERENCE_PARAMS

    def gpu(self, params: int) -> float:
        return self.gpu_fixed_s + self.gpu_s_per_bparam * params / 1e9


MEASURED: dict[str, SampleCost] = {
    "arith": SampleCost(cpu_s=2.81, gpu_fixed_s=0.19, gpu_s_per_bparam=0.0114),
    "gsm8k": SampleCost(cpu_s=6.32, gpu_fixed_s=0.43, gpu_s_per_bparam=0.0257),
    "truthfulqa-mc1": SampleCost(cpu_s=1.24, gpu_fixed_s=0.0020, gpu_s_per_bparam=0.0021),
}
"""Per benchmark, as ``quorumbench eval`` runs it (its default prompt style, shots and
token limit; batch size 8)."""
BY_KIND: dict[str, SampleCost] = {
    "generate": MEASURED["gsm8k"],
    "choice": MEASURED["truthfulqa-mc1"],
}
"""Any other benchmark, by its kind: a long-answer generation (GSM8K's 256-token limit)
and a multiple-choice scoring, the dearer measured one of each kind."""


@dataclass(frozen=True)
class BenchmarkLoad:
    """What one active benchmark asks of a runner per epoch."""

    name: str
    kind: str
    samples: int


def sample_cost(load: BenchmarkLoad) -> SampleCost:
    return MEASURED.get(load.name) or BY_KIND.get(load.kind) or BY_KIND["generate"]


def estimate_epoch(params: int, loads: Sequence[BenchmarkLoad], quorum: int) -> CostEstimate:
    """The cost of one epoch of first tasks (one per benchmark in ``loads``) of a model
    of ``params`` parameters, per runner (see the module docstring)."""
    parts = [
        BenchmarkCost(
            name=load.name,
            kind=load.kind,
            samples=load.samples,
            cpu_seconds=round(load.samples * sample_cost(load).cpu(params), 1),
            gpu_seconds=round(load.samples * sample_cost(load).gpu(params), 2),
        )
        for load in loads
    ]
    return CostEstimate(
        params=params,
        samples=sum(load.samples for load in loads),
        cpu_seconds=round(sum(p.cpu_seconds for p in parts), 1),
        gpu_seconds=round(sum(p.gpu_seconds for p in parts), 2),
        quorum=quorum,
        benchmarks=parts,
        reference_cpu=REFERENCE_CPU,
        reference_gpu=REFERENCE_GPU,
        method=(
            "an estimate, not a measurement: samples per task × seconds per sample, summed "
            "over the active benchmarks; seconds per sample were measured with "
            f"SmolLM2-135M ({REFERENCE_PARAMS:,} parameters) and scale with the "
            "parameters (on the GPU: a fixed part per sample plus a part per billion "
            "parameters); answer lengths, batch size, downloads and deeper tiers are "
            "not counted"
        ),
    )


def describe(cost: CostEstimate) -> str:
    """The estimate in one sentence (the report's ``cost-estimate`` finding)."""
    return (
        f"estimated cost of one epoch of first tasks: {cost.samples} samples per runner, "
        f"about {_duration(cost.cpu_seconds)} on the reference CPU or "
        f"{_duration(cost.gpu_seconds)} on the reference GPU, for each of the "
        f"{cost.quorum} runners a task needs (an estimate from measured rates, scaled by "
        f"{cost.params:,} parameters)"
    )


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
