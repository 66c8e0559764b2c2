"""Throughput and agreement: our engine vs lm-evaluation-harness on the same items.

Runs the same TruthfulQA-MC1 and GSM8K items (selected by our seeded sampler) and
the first HumanEval problems through quorumbench's engine and through lm-eval's
``HFLM`` on the same weights (the bundled SmolLM2-135M-Instruct, converted to a float32
transformers directory), both on the CPU, and prints samples/s, the ratio, accuracy
and the share of identical per-sample predictions. The last lines are
machine-readable::

    RESULT engine=<e> task=<name> ours_sps=<x> lmeval_sps=<y> ratio=<r> agree=<fraction>

``--engine llamacpp`` runs ours on llama.cpp with the GGUF file as it is (Q4_1), as
runners evaluate ``bundled:`` and ``gguf:`` refs; lm-eval still runs its HF path on
the de-quantized float32 conversion of that file (its ``gguf`` model type needs a
llama.cpp server, whose speed would then be llama.cpp's, not lm-eval's). The
agreement then also measures the two engines' arithmetic, not only our code.

lm-eval lives in its own virtualenv (``benchmarks/.lmeval-venv``, created on first
use) and runs in a child process (``_lmeval_child.py``). It gets the selected items
as JSONL files with our already-rendered prompts plus one task YAML per task, so
both sides score exactly the same strings. Model loading is not timed on either
side: ours times ``evaluate()``, lm-eval's child times ``simple_evaluate()``.

Run from the repository root::

    python benchmarks/eval_throughput.py                      # full run, ~15 min
    python benchmarks/eval_throughput.py --mc1-items 5 --gsm8k-items 2
    python benchmarks/eval_throughput.py --skip-lmeval        # ours only
    python benchmarks/eval_throughput.py --tasks humaneval    # HumanEval only
    python benchmarks/eval_throughput.py --engine llamacpp    # ours on llama.cpp

HumanEval (``--humaneval-items``, default 20: problems ``000``…``019``) runs each of
our programs in a fresh bubblewrap sandbox (``--code-sandbox``) and prints how our
time splits between generation and the sandbox. lm-eval generates the same
completions with ``predict_only`` (its ``code_eval`` metric would run the programs
unsandboxed in its own process, behind ``HF_ALLOW_CODE_EVAL=1``; we do not run that),
so its time is generation only while ours includes running every program: the
ratio leans against us. Agreement there is the share of byte-identical completions.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
CHILD = HERE / "_lmeval_child.py"
MODEL_REF = "bundled:smollm2-135m-instruct"
TASKS = ("truthfulqa-mc1", "gsm8k", "humaneval")
CODE_TASKS = ("humaneval",)
ENGINES = ("transformers", "llamacpp")
LMEVAL_TASK = {
    "truthfulqa-mc1": "qb_truthfulqa_mc1",
    "gsm8k": "qb_gsm8k",
    "humaneval": "qb_humaneval",
}
OUTPUT_TYPE = {
    "truthfulqa-mc1": "multiple_choice",
    "gsm8k": "generate_until",
    "humaneval": "generate_until",
}
TARGET_RATIO = {"truthfulqa-mc1": 8.0, "gsm8k": 4.0, "humaneval": 4.0}
TARGET_AGREE = {"truthfulqa-mc1": 0.99, "gsm8k": 0.95, "humaneval": 0.95}
"""The issue's targets: identical MC predictions, identical GSM8K answers; it sets no
agreement target for HumanEval, which is held to GSM8K's (identical completions)."""


# -- arguments ----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    default_datasets = os.environ.get("QB_DATASETS_DIR") or str(REPO.parent / "shared/datasets")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets-dir", type=Path, default=Path(default_datasets))
    p.add_argument("--mc1-items", type=int, default=100)
    p.add_argument("--gsm8k-items", type=int, default=20)
    p.add_argument("--humaneval-items", type=int, default=20)
    p.add_argument("--code-sandbox", default="auto", help="auto, bwrap, unshare or none")
    p.add_argument("--seed", default="0")
    p.add_argument("--batch-size", type=int, default=8, help="our engine's batch size")
    p.add_argument("--engine", choices=ENGINES, default="transformers", help="ours' engine")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset")
    p.add_argument("--skip-lmeval", action="store_true", help="run our engine only")
    p.add_argument("--lmeval-venv", type=Path, default=HERE / ".lmeval-venv")
    p.add_argument(
        "--lmeval-from",
        type=Path,
        help="an earlier run's directory whose lm-eval side (same items) to reuse, untimed",
    )
    p.add_argument(
        "--out-dir",
        type=Path,
        default=HERE / "out",
        help="where each run keeps its items, task YAMLs and raw outputs (git-ignored)",
    )
    args = p.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(args.tasks) - set(TASKS))
    if unknown:
        p.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    return args


def items_for(args: argparse.Namespace, task: str) -> int:
    return int(args.mc1_items if task == "truthfulqa-mc1" else args.gsm8k_items)


# -- our engine ---------------------------------------------------------------------


@dataclass
class OursRun:
    task: str
    items: list[dict[str, Any]]  # what lm-eval gets: id + rendered prompt (+ choices/gold)
    contexts: dict[str, list[tuple[str, str]]]  # id -> the request arguments we scored
    predictions: dict[str, str | None]
    outputs: dict[str, str]
    correct: dict[str, bool]
    seconds: float
    engine_seconds: float
    stop: tuple[str, ...] = ()
    max_new_tokens: int = 0
    code_line: str = ""  # HumanEval: how our time split between generation and sandbox

    @property
    def sps(self) -> float:
        return len(self.items) / self.seconds

    @property
    def accuracy(self) -> float:
        return sum(self.correct.values()) / len(self.correct)


class _Counter:
    """A progress callback printing ``done/total`` now and then."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.every = max(1, total // 10)

    def __call__(self, n: int) -> None:
        self.done += n
        if self.done % self.every == 0 or self.done == self.total:
            print(f"  [ours] {self.label}: {self.done}/{self.total}", flush=True)


def _requests(
    task: str, bench: Any, samples: Sequence[Any]
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, str]]], tuple[str, ...], int]:
    """What lm-eval gets for ``samples`` (our plain-style requests, rendered): the
    items, the request arguments per item, and the generation's stops and limit."""
    from quorumbench.evaluation.backend import ChoiceRequest, GenerateRequest

    items: list[dict[str, Any]] = []
    contexts: dict[str, list[tuple[str, str]]] = {}
    stop: tuple[str, ...] = ()
    max_new_tokens = 0
    for sample in samples:
        request = bench.request(sample, "plain")
        if isinstance(request, ChoiceRequest):
            choices = [c.removeprefix(" ") for c in request.continuations]
            if [" " + c for c in choices] != list(request.continuations):
                raise SystemExit(f"{task} {sample.id}: a continuation lacks its leading space")
            items.append({"id": sample.id, "context": request.context, "choices": choices})
            contexts[sample.id] = [(request.context, c) for c in request.continuations]
            continue
        assert isinstance(request, GenerateRequest) and request.prompt.text is not None
        items.append(
            {"id": sample.id, "prompt": request.prompt.text, "gold": sample.fields.get("gold")}
        )
        contexts[sample.id] = [(request.prompt.text, "")]
        if stop and (stop, max_new_tokens) != (request.stop, request.max_new_tokens):
            raise SystemExit(f"{task}: items differ in stop sequences or token limits")
        stop, max_new_tokens = request.stop, request.max_new_tokens
    return items, contexts, stop, max_new_tokens


def run_ours(args: argparse.Namespace, backend: Any, task: str) -> OursRun:
    from quorumbench.benchmarks import load_benchmark
    from quorumbench.evaluation.benchmark import BenchmarkContext
    from quorumbench.evaluation.engine import EvalConfig, evaluate, select_samples

    n = items_for(args, task)
    bench = load_benchmark(task, BenchmarkContext(datasets_dir=args.datasets_dir))
    samples = select_samples(bench, n, args.seed)
    requests = _requests(task, bench, samples)
    config = EvalConfig(n=n, seed=args.seed, batch_size=args.batch_size, prompt_style="plain")
    print(f"[ours] {task}: {n} items, batch size {args.batch_size}", flush=True)
    t0 = time.perf_counter()
    result = evaluate(bench, backend, config, progress=_Counter(task, n))
    seconds = time.perf_counter() - t0
    ids = [s.id for s in samples]
    if [r.id for r in result.samples] != ids:
        raise SystemExit(f"{task}: evaluate() used other items than select_samples()")
    return _ours_run(task, requests, result, seconds)


def _ours_run(
    task: str, requests: tuple[Any, ...], result: Any, seconds: float, code_line: str = ""
) -> OursRun:
    """An :class:`OursRun` from :func:`_requests`' tuple and ``evaluate()``'s result; a
    code task's prediction is its completion (what lm-eval's is compared with)."""
    items, contexts, stop, max_new_tokens = requests
    code = task in CODE_TASKS
    return OursRun(
        task=task,
        items=items,
        contexts=contexts,
        predictions={r.id: r.output if code else r.prediction for r in result.samples},
        outputs={r.id: r.output for r in result.samples},
        correct={r.id: r.correct for r in result.samples},
        seconds=seconds,
        engine_seconds=result.runtime_s,
        stop=stop,
        max_new_tokens=max_new_tokens,
        code_line=code_line,
    )


class _TimedExecutor:
    """The runner's code executor, timed: how long the sandbox took in all."""

    def __init__(self, executor: Any) -> None:
        self.executor, self.seconds, self.runs = executor, 0.0, 0
        self.kind = executor.kind

    def run(self, program: str, *, timeout_s: float) -> Any:
        t0 = time.perf_counter()
        try:
            return self.executor.run(program, timeout_s=timeout_s)
        finally:
            self.seconds += time.perf_counter() - t0
            self.runs += 1


def run_code(args: argparse.Namespace, backend: Any, task: str) -> OursRun:
    """A code benchmark through ours on its first problems, every program run in the
    runner's sandbox; the split of our time between generation and the sandbox is in
    ``code_line``."""
    from quorumbench.benchmarks import load_benchmark
    from quorumbench.evaluation.benchmark import BenchmarkContext
    from quorumbench.evaluation.engine import EvalConfig, evaluate
    from quorumbench.runner.code_exec import CODE_LIMITS, code_runner
    from quorumbench.runner.sandbox import protected_paths, resolve_sandbox

    sandbox = resolve_sandbox(args.code_sandbox, CODE_LIMITS, protected_paths())
    timed = _TimedExecutor(code_runner(sandbox))
    bench = load_benchmark(task, BenchmarkContext(executor=timed))
    n = args.humaneval_items
    samples = bench.samples(list(bench.sample_ids())[:n])
    requests = _requests(task, bench, samples)
    config = EvalConfig(n=n, seed="fixed", batch_size=args.batch_size, prompt_style="plain")
    print(f"[ours] {task}: problems {samples[0].id}..{samples[-1].id}, {timed.kind}", flush=True)
    t0 = time.perf_counter()
    result = evaluate(bench, backend, config, progress=_Counter(task, n), samples=samples)
    seconds = time.perf_counter() - t0
    passed = sum(r.correct for r in result.samples)
    share = timed.seconds / seconds
    per_program = timed.seconds / max(1, timed.runs)
    print(
        f"[ours] {task}: generation {result.runtime_s:.1f}s, sandbox {timed.seconds:.1f}s "
        f"for {timed.runs} programs ({per_program:.2f}s each, {share:.0%} of the time); "
        f"pass@1 {passed}/{n}",
        flush=True,
    )
    code_line = (
        f"sandbox_share={share:.3f} sandbox_s_per_program={per_program:.3f} passed={passed}/{n}"
    )
    return _ours_run(task, requests, result, seconds, code_line)


# -- lm-eval venv, items and task YAMLs -----------------------------------------------


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _venv_versions(python: Path) -> dict[str, str | None]:
    code = (
        "import importlib.metadata as m, json\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        "print(json.dumps({n: v(n) for n in ('lm_eval', 'transformers', 'torch', 'accelerate')}))"
    )
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    versions: dict[str, str | None] = json.loads(out.stdout)
    return versions


def _pip(python: Path, *packages: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--progress-bar", "on", *packages]
    print(f"[setup] $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)


def ensure_lmeval_venv(venv: Path) -> dict[str, str | None]:
    """Create (once) the lm-eval virtualenv with our torch and transformers versions."""
    transformers = importlib.metadata.version("transformers")
    torch = importlib.metadata.version("torch").split("+")[0]
    python = _venv_python(venv)
    if not python.exists():
        print(f"[setup] creating virtualenv {venv} (one time; a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # torch first, pinned, so that lm-eval's dependency on torch is already met
        # by the CPU build on local disk and pip never reaches for a CUDA build.
        _pip(python, f"torch=={torch}")
    versions = _venv_versions(python)
    wanted = (
        versions["lm_eval"] is not None
        and versions["accelerate"] is not None
        and versions["transformers"] == transformers
        and (versions["torch"] or "").split("+")[0] == torch
    )
    if not wanted:
        print(f"[setup] installing lm-eval[hf] with transformers=={transformers}", flush=True)
        _pip(python, f"torch=={torch}", "lm-eval[hf]", f"transformers=={transformers}")
        versions = _venv_versions(python)
    print(f"[setup] lm-eval venv ready: {versions}", flush=True)
    return versions


def _yaml(config: dict[str, Any]) -> str:
    """YAML whose values are JSON (a subset of YAML): no escaping surprises."""
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in config.items())


def task_yaml(task: str, data_file: Path, run: OursRun) -> str:
    common: dict[str, Any] = {
        "task": LMEVAL_TASK[task],
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "num_fewshot": 0,
    }
    if task == "truthfulqa-mc1":
        return _yaml(
            {
                **common,
                "output_type": OUTPUT_TYPE[task],
                "doc_to_text": "{{context}}",
                "doc_to_choice": "{{choices}}",
                "target_delimiter": " ",
                "doc_to_target": 0,
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": 1.0},
            }
        )
    generation_kwargs = {
        "until": list(run.stop),
        "do_sample": False,
        "max_gen_toks": run.max_new_tokens,
    }
    if task in CODE_TASKS:
        # lm-eval's own humaneval task: the prompt, its stops, 1,024 tokens; run with
        # predict_only, which replaces the metric by "bypass" (no program is run).
        return _yaml(
            {
                **common,
                "output_type": OUTPUT_TYPE[task],
                "doc_to_text": "{{prompt}}",
                "doc_to_target": "{{id}}",
                "generation_kwargs": generation_kwargs,
                "metadata": {"version": 1.0},
            }
        )
    return _yaml(
        {
            **common,
            "output_type": OUTPUT_TYPE[task],
            "doc_to_text": "{{prompt}}",
            "doc_to_target": "{{gold}}",
            "generation_kwargs": generation_kwargs,
            # the same metric and filters as lm-eval's own gsm8k task
            "metric_list": [
                {
                    "metric": "exact_match",
                    "aggregation": "mean",
                    "higher_is_better": True,
                    "ignore_case": True,
                    "ignore_punctuation": False,
                    "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"],
                }
            ],
            "filter_list": [
                {
                    "name": "strict-match",
                    "filter": [
                        {"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                        {"function": "take_first"},
                    ],
                },
                {
                    "name": "flexible-extract",
                    "filter": [
                        {
                            "function": "regex",
                            "group_select": -1,
                            "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)",
                        },
                        {"function": "take_first"},
                    ],
                },
            ],
            "metadata": {"version": 1.0},
        }
    )


def write_lmeval_inputs(run_dir: Path, runs: Sequence[OursRun]) -> Path:
    include = run_dir / "lmeval_tasks"
    include.mkdir(parents=True, exist_ok=True)
    for run in runs:
        data_file = include / f"{LMEVAL_TASK[run.task]}.jsonl"
        fields = {
            "truthfulqa-mc1": ("id", "context", "choices"),
            "gsm8k": ("id", "prompt", "gold"),
            "humaneval": ("id", "prompt"),
        }[run.task]
        with data_file.open("w", encoding="utf-8") as fh:
            for item in run.items:
                row = {k: item[k] for k in fields}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        yaml_file = include / f"{LMEVAL_TASK[run.task]}.yaml"
        yaml_file.write_text(task_yaml(run.task, data_file, run), encoding="utf-8")
    return include


def run_lmeval(
    args: argparse.Namespace, run_dir: Path, model_dir: str, runs: Sequence[OursRun]
) -> dict[str, Any]:
    include = write_lmeval_inputs(run_dir, runs)
    if args.lmeval_from is not None:
        return reused_lmeval(args.lmeval_from, include, runs)
    spec = {
        "model_dir": model_dir,
        "include_path": str(include),
        "tasks": [
            {
                "name": LMEVAL_TASK[r.task],
                "output_type": OUTPUT_TYPE[r.task],
                "predict_only": r.task in CODE_TASKS,
            }
            for r in runs
        ],
    }
    spec_file, out_file = run_dir / "lmeval_spec.json", run_dir / "lmeval_result.json"
    spec_file.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_CACHE=str(run_dir / "hf-datasets-cache"),
    )
    python = _venv_python(args.lmeval_venv)
    cmd = [str(python), str(CHILD), str(spec_file), str(out_file)]
    print(f"[lm-eval] $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=run_dir)
    report: dict[str, Any] = json.loads(out_file.read_text(encoding="utf-8"))
    return report


def reused_lmeval(earlier: Path, include: Path, runs: Sequence[OursRun]) -> dict[str, Any]:
    """An earlier run's lm-eval report, refused unless that run gave lm-eval exactly
    the items, prompts and task settings this run would."""
    report: dict[str, Any] = json.loads((earlier / "lmeval_result.json").read_text("utf-8"))
    for run in runs:
        for suffix in (".jsonl", ".yaml"):
            name = LMEVAL_TASK[run.task] + suffix
            old, new = earlier / "lmeval_tasks" / name, include / name
            old_text = old.read_text("utf-8") if old.is_file() else None
            if suffix == ".yaml" and old_text is not None:
                old_text = old_text.replace(str(earlier.resolve()), str(include.parent.resolve()))
            if old_text != new.read_text("utf-8") or LMEVAL_TASK[run.task] not in report["tasks"]:
                raise SystemExit(f"--lmeval-from {earlier}: lm-eval ran other {run.task} items")
    print(f"[lm-eval] reusing the lm-eval side of {earlier} (same items and settings)")
    return report


# -- comparison ---------------------------------------------------------------------


@dataclass
class Comparison:
    task: str
    lmeval_seconds: float
    lmeval_accuracy: float | None  # None: not scored (HumanEval's programs are not run)
    agree: float
    disagreeing: list[str]
    prompt_mismatches: list[str]
    notes: list[str]

    def ratio(self, ours: OursRun) -> float:
        return self.lmeval_seconds / ours.seconds


def _argmax_first(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def _suffix(key: str) -> int:
    return int(key.rsplit("_", 1)[-1])


def _lmeval_arguments(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(context, continuation) per request as lm-eval logged them."""
    arguments = doc["arguments"]
    if isinstance(arguments, dict):  # {"gen_args_0": {"arg_0": ..., "arg_1": ...}, ...}
        arguments = [list(arguments[k].values()) for k in sorted(arguments, key=_suffix)]
    pairs = []
    for argument in arguments:
        context, second = argument[0], argument[1]
        pairs.append((context, second if isinstance(second, str) else ""))
    return pairs


def compare(ours: OursRun, task_report: dict[str, Any]) -> Comparison:
    from quorumbench.evaluation.extract import extract_final_number, truncate_at_stop

    docs = {d["id"]: d for d in task_report["docs"]}
    if sorted(docs) != sorted(ours.predictions):
        raise SystemExit(f"{ours.task}: lm-eval scored other items than ours")
    disagreeing, mismatches, notes = [], [], []
    correct = 0
    identical_raw = 0
    max_ll_diff = 0.0
    for item in ours.items:
        sample_id, doc = item["id"], docs[item["id"]]
        if _lmeval_arguments(doc) != ours.contexts[sample_id]:
            mismatches.append(sample_id)
        if ours.task == "truthfulqa-mc1":
            lls = doc["loglikelihoods"]
            theirs: str | None = str(_argmax_first(lls))
            correct += theirs == "0"
            mine = json.loads(ours.outputs[sample_id])["loglikelihoods"]
            max_ll_diff = max(max_ll_diff, *(abs(a - b) for a, b in zip(mine, lls, strict=True)))
        else:
            raw, _ = truncate_at_stop(doc["response"], ours.stop)
            identical_raw += raw == ours.outputs[sample_id]
            theirs = raw if ours.task in CODE_TASKS else extract_final_number(raw)
            correct += theirs is not None and theirs == item["gold"]
        if theirs != ours.predictions[sample_id]:
            disagreeing.append(sample_id)
    n = len(ours.items)
    if ours.task == "truthfulqa-mc1":
        notes.append(f"max |log-likelihood difference| ours vs lm-eval: {max_ll_diff:.2e}")
    else:
        notes.append(f"byte-identical raw outputs: {identical_raw}/{n}")
    for key, value in task_report["metrics"].items():
        if key.startswith(("acc,", "exact_match,")):
            notes.append(f"lm-eval's own {key}: {value}")
    return Comparison(
        task=ours.task,
        lmeval_seconds=float(task_report["seconds"]),
        lmeval_accuracy=None if ours.task in CODE_TASKS else correct / n,
        agree=1 - len(disagreeing) / n,
        disagreeing=disagreeing,
        prompt_mismatches=mismatches,
        notes=notes,
    )


def show_disagreement(ours: OursRun, task_report: dict[str, Any], sample_id: str) -> None:
    import difflib

    from quorumbench.evaluation.extract import truncate_at_stop

    doc = next(d for d in task_report["docs"] if d["id"] == sample_id)
    if ours.task == "truthfulqa-mc1":
        print(f"    ours   {ours.outputs[sample_id]}")
        print(f"    lm-eval loglikelihoods {doc['loglikelihoods']}")
        return
    diff = difflib.unified_diff(
        ours.outputs[sample_id].splitlines(),
        truncate_at_stop(doc["response"], ours.stop)[0].splitlines(),
        "ours",
        "lm-eval",
        lineterm="",
    )
    for line in diff:
        print(f"    {line}")


# -- main ---------------------------------------------------------------------------


def describe_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores"


def load_average() -> str:
    """1-minute load average: well above 2 on this 2-core machine means noisy timings."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def lmeval_model_dir(options: Any) -> str:
    """The float32 transformers directory lm-eval loads: the bundled GGUF's conversion
    (made on first use; the same weights ours runs on transformers)."""
    from quorumbench.backends.gguf import converted_dir
    from quorumbench.backends.local import fetch_model

    model = fetch_model(MODEL_REF, options)
    assert model.gguf_file is not None, model
    return str(converted_dir(model.gguf_file, model.gguf_digest, options.cache_dir))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from quorumbench.backends import BackendOptions, load_backend

    now = datetime.now(UTC)
    run_dir = args.out_dir / f"eval-throughput-{now:%Y%m%dT%H%M%SZ}"
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"date {now.isoformat(timespec='seconds')}; machine {describe_machine()}")
    print(
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {importlib.metadata.version('transformers')}; outputs in {run_dir}"
    )
    lmeval_versions = None
    if not args.skip_lmeval and args.lmeval_from is None:
        lmeval_versions = ensure_lmeval_venv(args.lmeval_venv)

    print(f"[ours] loading {MODEL_REF} on {args.engine} (not timed)", flush=True)
    t0 = time.perf_counter()
    options = BackendOptions(device="cpu", dtype="float32", engine=args.engine)
    backend = load_backend(MODEL_REF, options)
    model_dir = lmeval_model_dir(options)
    print(f"[ours] loaded in {time.perf_counter() - t0:.1f}s: {backend.info.details}", flush=True)
    runs = []
    loads = {"before ours": load_average()}
    try:
        for task in args.tasks:
            run = (run_code if task in CODE_TASKS else run_ours)(args, backend, task)
            print(
                f"[ours] {task}: {len(run.items)} items in {run.seconds:.1f}s "
                f"({run.sps:.3f} samples/s; backend {run.engine_seconds:.1f}s), "
                f"accuracy {run.accuracy:.3f}",
                flush=True,
            )
            runs.append(run)
    finally:
        backend.close()
    del backend
    ours_dump = {r.task: {"seconds": r.seconds, "outputs": r.outputs} for r in runs}
    (run_dir / "ours_result.json").write_text(json.dumps(ours_dump, indent=1), encoding="utf-8")
    if args.skip_lmeval or not runs:
        for run in runs:
            line = f"RESULT engine={args.engine} task={run.task} ours_sps={run.sps:.4f}"
            print(f"{line} {run.code_line}".rstrip())
        return 0

    loads["before lm-eval"] = load_average()
    report = run_lmeval(args, run_dir, model_dir, runs)
    loads["at end"] = load_average()
    print()
    print("=" * 78)
    print(f"date {now:%Y-%m-%d %H:%M} UTC; machine {describe_machine()}")
    print(
        f"model {MODEL_REF}; ours: quorumbench on {args.engine} "
        f"({'the Q4_1 GGUF as it is' if args.engine == 'llamacpp' else 'float32, cpu'}), "
        f"batch size {args.batch_size}; lm-eval {report['versions']['lm_eval']} HFLM "
        f"(float32 conversion, cpu) batch size 1; "
        f"transformers {report['versions']['transformers']}, torch {report['versions']['torch']}"
    )
    if args.lmeval_from is not None:
        print(f"lm-eval side reused from {args.lmeval_from} (timed there, not in this run)")
    else:
        print(f"lm-eval venv: {lmeval_versions}")
    print("1-min load average: " + ", ".join(f"{k} {v}" for k, v in loads.items()))
    results = []
    ok = True
    for run in runs:
        task_report = report["tasks"][LMEVAL_TASK[run.task]]
        cmp = compare(run, task_report)
        lmeval_sps = len(run.items) / cmp.lmeval_seconds
        ratio = cmp.ratio(run)
        print("-" * 78)
        chosen = "the first problems" if run.task in CODE_TASKS else f"seed {args.seed!r}"
        print(f"{run.task}: {len(run.items)} items ({chosen})")
        print(f"  ours     {run.seconds:8.1f} s  {run.sps:8.4f} samples/s  acc {run.accuracy:.3f}")
        their_acc = "n/a" if cmp.lmeval_accuracy is None else f"{cmp.lmeval_accuracy:.3f}"
        print(
            f"  lm-eval  {cmp.lmeval_seconds:8.1f} s  {lmeval_sps:8.4f} samples/s  acc {their_acc}"
        )
        target, target_agree = TARGET_RATIO[run.task], TARGET_AGREE[run.task]
        print(f"  ratio    {ratio:.2f}x (target >= {target:g}x)")
        print(f"  agree    {cmp.agree:.4f} identical predictions (target >= {target_agree:g})")
        if run.code_line:
            print(f"  ours ran every program in the sandbox, lm-eval none: {run.code_line}")
        for note in cmp.notes:
            print(f"  {note}")
        if cmp.prompt_mismatches:
            print(
                f"  WARNING: lm-eval's request strings differ from ours for "
                f"{len(cmp.prompt_mismatches)} items: {', '.join(cmp.prompt_mismatches)}"
            )
        else:
            print("  prompts: lm-eval's logged request arguments equal ours for every item")
        if cmp.disagreeing:
            print(f"  disagreeing ids: {', '.join(cmp.disagreeing)}")
            print(f"  first disagreement ({cmp.disagreeing[0]}):")
            show_disagreement(run, task_report, cmp.disagreeing[0])
        ok = ok and ratio >= target and cmp.agree >= target_agree
        results.append(
            f"RESULT engine={args.engine} task={run.task} ours_sps={run.sps:.4f} "
            f"lmeval_sps={lmeval_sps:.4f} ratio={ratio:.2f} agree={cmp.agree:.4f}"
        )
    print("-" * 78)
    print(f"targets {'met' if ok else 'NOT met'}; raw outputs in {run_dir}")
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
