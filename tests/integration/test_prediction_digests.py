"""The predictions digest of the real SmolLM2-135M does not depend on the batch size or
on the backend path (transformers directory, or the GGUF file converted through the
cache), while the raw-output digest depends on the batch size.

Twenty TruthfulQA-MC1 items, evaluated three times (transformers at batch sizes 1 and
8, the ``gguf:`` path at 16), in one test: two tests sharing a module-scoped fixture ran
them twice whenever pytest-xdist sent them to different workers. Until 2026-12-07 a
fourth run, transformers at 16, took 18 of the test's 68 s: the ``gguf:`` path loads the
same converted directory into the same transformers model, so its run at 16 is that
batch size's run, and its predictions being the others' checks the path and the size.
"""

from __future__ import annotations

import pytest

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.benchmarks import load_benchmark
from quorumbench.core.canonical import predictions_digest
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate

pytestmark = [pytest.mark.model, pytest.mark.data, pytest.mark.slow]

N = 20
SEED = "digest"


def evaluate_all(smollm2_backend, smollm2_gguf, model_cache_dir, datasets_dir):
    """(path, batch size) -> the run of the same 20 items."""
    bench = load_benchmark("truthfulqa-mc1", BenchmarkContext(datasets_dir))
    out = {
        ("hf", size): evaluate(bench, smollm2_backend, EvalConfig(n=N, seed=SEED, batch_size=size))
        for size in (1, 8)
    }
    gguf = load_backend(
        f"gguf:{smollm2_gguf}", BackendOptions(device="cpu", cache_dir=model_cache_dir)
    )
    try:
        assert gguf.info.backend == "gguf"
        out[("gguf", 16)] = evaluate(bench, gguf, EvalConfig(n=N, seed=SEED, batch_size=16))
    finally:
        gguf.close()
    return out


def test_predictions_digest_is_the_same_for_every_batch_size_and_path_and_outputs_differ(
    smollm2_backend, smollm2_gguf, model_cache_dir, datasets_dir
):
    runs = evaluate_all(smollm2_backend, smollm2_gguf, model_cache_dir, datasets_dir)
    predictions_are_the_same(runs)
    raw_outputs_differ_while_predictions_do_not(runs)


def predictions_are_the_same(runs):
    first = runs[("hf", 1)]
    assert first.n == N
    assert all(isinstance(p, int) for p in first.sample_predictions)
    assert first.predictions_sha256 == predictions_digest(first.sample_predictions)
    for key, run in runs.items():
        assert [s.id for s in run.samples] == [s.id for s in first.samples], key
        assert run.sample_predictions == first.sample_predictions, key
        assert run.predictions_sha256 == first.predictions_sha256, key
        assert [s.score for s in run.samples] == [s.score for s in first.samples], key


def raw_outputs_differ_while_predictions_do_not(runs):
    # Observed on CPU: some log-likelihoods differ in their 4th decimal between batch
    # shapes (e.g. -36.2613 at 1, -36.2612 at 8), and the outputs digests differ. (They
    # even depend on the batch size that first filled the backend's cache of the shared
    # primer.)
    one, eight = runs[("hf", 1)], runs[("hf", 8)]
    assert one.outputs_sha256 != eight.outputs_sha256
    differing = [
        a.id for a, b in zip(one.samples, eight.samples, strict=True) if a.output != b.output
    ]
    assert differing  # the raw outputs of some items differ...
    predictions = {key: run.predictions_sha256 for key, run in runs.items()}
    assert len(set(predictions.values())) == 1, predictions  # ...and no prediction does
