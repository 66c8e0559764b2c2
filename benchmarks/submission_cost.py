"""The measurements behind the submission report's cost estimate.

``services/submissions/estimate.py`` turns a model's size into seconds per sample on
a reference CPU and a reference GPU. This script measures what those constants rest on:

``engine``
    quorumbench's engine on the bundled SmolLM2-135M-Instruct (float32, on the CPU),
    as a runner runs a task: the model loaded once and warmed up, then tasks of
    ``--samples`` samples (5, ``QB_SAMPLES_PER_TASK``) drawn with several seeds, each
    timed alone. Prints, per benchmark, the median seconds per sample::

        RESULT mode=engine benchmark=<name> kind=<kind> s_per_sample=<x> tasks=<n>

``synthetic``
    the same shapes of work through plain transformers models of several sizes with
    random weights (what a forward pass costs does not depend on the weights' values),
    so that a GPU machine without the model files can be measured: a batch of
    ``--batch`` prompts of ``--prompt-tokens`` tokens generating ``--new-tokens`` tokens
    (``generate``), and the same prompts scored with four options each in one forward
    pass (``choice``). It needs only torch and transformers::

        RESULT mode=synthetic device=<d> size=<name> params=<n> kind=<kind> s_per_sample=<x>

Run from the repository root::

    python benchmarks/submission_cost.py engine --datasets-dir ../shared/datasets
    python benchmarks/submission_cost.py synthetic --device cpu --sizes 135m
    python benchmarks/submission_cost.py synthetic --device cuda --sizes 135m,1.7b,7b,14b
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    # SmolLM2-135M's shape (the bundled model)
    "135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
    # SmolLM2-1.7B's shape
    "1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
    # Llama-2-7B's shape
    "7b": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    # Qwen2.5-14B's shape (as a Llama: the same matrices)
    "14b": {
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
}
OPTIONS = 4
"""Options per sample in the synthetic ``choice`` work (TruthfulQA-MC1 has 4-13)."""


def _engine(args: argparse.Namespace) -> None:
    from quorumbench.backends import BackendOptions, load_backend
    from quorumbench.benchmarks import load_benchmark
    from quorumbench.evaluation.benchmark import BenchmarkContext
    from quorumbench.evaluation.engine import EvalConfig, evaluate, select_samples

    backend = load_backend(
        args.model, BackendOptions(device="cpu", dtype="float32", cache_dir=args.cache_dir)
    )
    try:
        for name in args.benchmarks.split(","):
            bench = load_benchmark(name, BenchmarkContext(datasets_dir=args.datasets_dir))
            warm = EvalConfig(n=1, seed="warm-up", batch_size=args.batch)
            evaluate(bench, backend, warm, samples=select_samples(bench, 1, "warm-up"))
            times = []
            for seed in range(args.tasks):
                config = EvalConfig(n=args.samples, seed=f"cost-{seed}", batch_size=args.batch)
                samples = select_samples(bench, args.samples, config.seed)
                start = time.perf_counter()
                evaluate(bench, backend, config, samples=samples)
                times.append((time.perf_counter() - start) / args.samples)
            print(
                f"RESULT mode=engine benchmark={name} kind={bench.kind} "
                f"s_per_sample={statistics.median(times):.4f} tasks={args.tasks} "
                f"all={','.join(f'{t:.3f}' for t in times)}",
                flush=True,
            )
    finally:
        backend.close()


def _synthetic(args: argparse.Namespace) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device(args.device)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.set_default_dtype(dtype)  # weights made in it: no float32 copy of a 14B model
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    for size in args.sizes.split(","):
        config = LlamaConfig(**SIZES[size], max_position_embeddings=4096)
        torch.manual_seed(0)
        with torch.device(device):
            model = LlamaForCausalLM(config).eval()
        params = sum(p.numel() for p in model.parameters())
        shape = (args.batch, args.prompt_tokens)
        prompts = torch.randint(5, config.vocab_size, shape, device=device)
        with torch.inference_mode():
            for kind in ("generate", "choice"):
                seconds = _time(model, prompts, kind, args, device)
                print(
                    f"RESULT mode=synthetic device={device.type} size={size} params={params} "
                    f"kind={kind} s_per_sample={seconds:.5f} "
                    f"batch={args.batch} prompt={args.prompt_tokens} new={args.new_tokens}",
                    flush=True,
                )
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _time(model: Any, prompts: Any, kind: str, args: argparse.Namespace, device: Any) -> float:
    """The median seconds per sample of ``kind`` work (after one warm-up run)."""
    import torch

    options = prompts.repeat_interleave(OPTIONS, dim=0)

    def work() -> None:
        if kind == "choice":
            model(options)
            return
        model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    work()
    sync()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        work()
        sync()
        times.append((time.perf_counter() - start) / args.batch)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    engine = sub.add_parser("engine", help="the engine on the bundled model, on the CPU")
    engine.add_argument("--model", default="bundled:smollm2-135m-instruct")
    engine.add_argument("--benchmarks", default="arith,truthfulqa-mc1,gsm8k")
    engine.add_argument("--datasets-dir", type=Path, default=None)
    engine.add_argument("--cache-dir", type=Path, default=None)
    engine.add_argument("--samples", type=int, default=5)
    engine.add_argument("--tasks", type=int, default=5)
    engine.add_argument("--batch", type=int, default=8)
    synthetic = sub.add_parser("synthetic", help="random-weight models of several sizes")
    synthetic.add_argument("--device", default="cpu")
    synthetic.add_argument("--sizes", default="135m")
    synthetic.add_argument("--batch", type=int, default=5)
    synthetic.add_argument("--prompt-tokens", type=int, default=300)
    synthetic.add_argument("--new-tokens", type=int, default=64)
    synthetic.add_argument("--repeats", type=int, default=3)
    synthetic.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    (_engine if args.mode == "engine" else _synthetic)(args)


if __name__ == "__main__":
    main()
