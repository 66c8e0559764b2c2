"""The llama.cpp engine (``backends/llamacpp.py``) against llama.cpp's own generation
and against the transformers path, on the bundled SmolLM2-135M-Instruct GGUF.

1. Decode speed: greedy generation of ``--decode-tokens`` tokens (EOS ignored) by our
   backend, and by llama-cpp-python's own ``Llama.create_completion`` (temperature 0,
   its sampler chain) on the same file, prompt and threads. Each is timed from the
   first generated token (prefill excluded) over the best of ``--repeats`` runs.
   Target: ours at least 90% of llama.cpp's own tokens/s.
2. Multiple choice: the same TruthfulQA-MC1 items (our seeded sampler) through our
   llama.cpp backend and through the transformers path on the de-quantized file:
   samples/s of each, the share of identical predictions (target 99%) and every item
   that differs, with its log-likelihoods.

Run from the repository root (needs the ``llamacpp`` extra and the datasets)::

    python benchmarks/llamacpp_engine.py
    python benchmarks/llamacpp_engine.py --mc1-items 20 --decode-tokens 128

The last lines are machine-readable ``RESULT`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Write a short story about a robot who learns to paint.\n\n"


def parse_args() -> argparse.Namespace:
    default_datasets = os.environ.get("QB_DATASETS_DIR") or str(REPO.parent / "shared/datasets")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets-dir", type=Path, default=Path(default_datasets))
    p.add_argument("--mc1-items", type=int, default=100)
    p.add_argument("--decode-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", default="0")
    return p.parse_args()


def ours_decode(backend: Any, tokens: int) -> float:
    """Our backend's decode tokens/s (first token to last, prefill excluded)."""
    from quorumbench.evaluation.backend import GenerateRequest, Prompt
    from quorumbench.evaluation.usage import recording_usage

    request = GenerateRequest(Prompt(text=PROMPT), (), tokens, ignore_eos=True, cache_prefix=False)
    with recording_usage() as usage:
        [result] = backend.generate([request], batch_size=1)
    assert result.n_tokens == tokens, result
    assert usage.decode_s
    return (tokens - 1) / usage.decode_s


def native_decode(gguf: Path, tokens: int, threads: int) -> float:
    """llama-cpp-python's own completion, greedy, timed from its first token."""
    import llama_cpp

    llama = llama_cpp.Llama(
        model_path=str(gguf),
        n_ctx=4096,
        n_threads=threads,
        n_threads_batch=threads,
        seed=0,
        verbose=False,
    )
    try:
        first_at = None
        count = 0
        for _ in llama.create_completion(
            PROMPT, max_tokens=tokens, temperature=0.0, stream=True, logit_bias={}
        ):
            count += 1
            if first_at is None:
                first_at = time.perf_counter()
        assert first_at is not None and count > 1
        return (count - 1) / (time.perf_counter() - first_at)
    finally:
        llama.close()


def main() -> None:
    args = parse_args()
    from quorumbench.backends import BackendOptions, load_backend
    from quorumbench.backends._registry import resolve_bundled
    from quorumbench.benchmarks import load_benchmark
    from quorumbench.evaluation.benchmark import BenchmarkContext
    from quorumbench.evaluation.engine import EvalConfig, evaluate
    from quorumbench.evaluation.refs import parse_ref

    ref = "bundled:smollm2-135m-instruct"
    gguf = Path(resolve_bundled(parse_ref(ref)).location)
    llama = load_backend(ref, BackendOptions(engine="llamacpp", threads=args.threads))
    hf = load_backend(ref, BackendOptions(device="cpu", threads=args.threads))
    print(f"model {gguf.name}, {args.threads} threads")

    ours = max(ours_decode(llama, args.decode_tokens) for _ in range(args.repeats))
    native = max(native_decode(gguf, args.decode_tokens, args.threads) for _ in range(args.repeats))
    print(f"decode: ours {ours:.1f} tokens/s, llama.cpp's own {native:.1f} tokens/s")

    bench = load_benchmark("truthfulqa-mc1", BenchmarkContext(args.datasets_dir))
    config = EvalConfig(args.mc1_items, args.seed, 8)
    started = time.perf_counter()
    mine = evaluate(bench, llama, config)
    mine_s = time.perf_counter() - started
    started = time.perf_counter()
    theirs = evaluate(bench, hf, config)
    theirs_s = time.perf_counter() - started
    pairs = list(zip(mine.samples, theirs.samples, strict=True))
    same = sum(a.prediction == b.prediction for a, b in pairs)
    for a, b in pairs:
        if a.prediction != b.prediction:
            lls = json.loads(a.output)["loglikelihoods"], json.loads(b.output)["loglikelihoods"]
            print(f"  differs {a.id}: llamacpp={a.prediction} {lls[0]} hf={b.prediction} {lls[1]}")
    n = len(pairs)
    print(
        f"RESULT engine=llamacpp decode_tps={ours:.1f} native_tps={native:.1f} "
        f"ratio={ours / native:.2f} target=0.90"
    )
    print(
        f"RESULT engine=llamacpp task=truthfulqa-mc1 items={n} llamacpp_sps={n / mine_s:.2f} "
        f"hf_sps={n / theirs_s:.2f} ratio={theirs_s / mine_s:.2f} agree={same / n:.3f} "
        f"target_agree=0.99"
    )
    llama.close()
    hf.close()


if __name__ == "__main__":
    main()
