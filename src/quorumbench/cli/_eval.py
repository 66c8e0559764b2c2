"""``quorumbench eval``: load, run with a progress bar, print and save."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from quorumbench.backends import BackendOptions, available_engines, load_backend
from quorumbench.benchmarks import load_benchmark
from quorumbench.cli._console import escape
from quorumbench.cli._output import print_result, write_json
from quorumbench.errors import ConfigError, SandboxRequiredError
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.execution import CodeExecutor, runs_code
from quorumbench.evaluation.refs import parse_ref
from quorumbench.evaluation.results import RunResult
from quorumbench.settings import get_settings

CodeSandbox = Literal["auto", "bwrap", "unshare", "none"]
"""Where a code benchmark runs its programs (``none``: ``--no-sandbox``)."""


@dataclass(frozen=True)
class EvalArgs:
    model: str
    benchmark: str
    samples: int
    seed: str
    batch_size: int
    json_path: Path | None
    datasets_dir: Path | None
    cache_dir: Path | None
    prompt_style: Literal["auto", "chat", "plain"]
    shots: int | None
    max_new_tokens: int | None
    device: str
    dtype: str
    allow_pickle: bool
    trust_remote_code: bool
    api_key: str | None
    concurrency: int
    threads: int | None
    show_samples: bool
    sandbox: CodeSandbox = "auto"
    """Where a code benchmark runs generated programs (``none``: ``--no-sandbox``)."""
    engine: Literal["transformers", "llamacpp", "auto"] = "auto"
    """What runs a GGUF file (``gguf:``/``bundled:`` refs) or a LoRA adapter on one
    (``auto``: llama.cpp where installed, as runners do)."""

    def __repr__(self) -> str:  # the API key must never reach a log or traceback
        return f"EvalArgs(model={self.model!r}, benchmark={self.benchmark!r}, ...)"


def _check_json_target(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"--json {path} is a directory; give a file path")
    if not path.parent.is_dir():
        raise ConfigError(f"--json {path}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise ConfigError(f"--json {path}: not writable here (permission denied)")


def _save(path: Path, result: RunResult) -> None:
    try:
        write_json(path, result)
    except OSError as exc:  # the disk filled up, or the directory went away, meanwhile
        raise ConfigError(f"--json {path}: cannot write it: {exc.strerror or exc}") from exc


def sandbox_choice(sandbox: str | None, no_sandbox: bool) -> CodeSandbox:
    """``--sandbox`` and ``--no-sandbox`` as one choice (``auto`` when neither)."""
    if no_sandbox and sandbox is not None:
        raise typer.BadParameter("use --sandbox or --no-sandbox, not both", param_hint="--sandbox")
    if no_sandbox:
        return "none"
    if sandbox in (None, "auto"):
        return "auto"
    if sandbox in ("bwrap", "unshare"):
        return sandbox  # type: ignore[return-value]
    raise typer.BadParameter(
        f"{sandbox!r}: use auto, bwrap or unshare (or --no-sandbox)", param_hint="--sandbox"
    )


def code_executor(benchmark: Benchmark, kind: CodeSandbox) -> CodeExecutor:
    """What runs a code benchmark's programs: a fresh sandbox each (``runner/code_exec``),
    or plain subprocesses with ``--no-sandbox``; refused in one line when no sandbox
    can be made."""
    from quorumbench.runner.code_exec import CODE_LIMITS, code_runner
    from quorumbench.runner.sandbox import protected_paths, resolve_sandbox

    if kind == "none":
        return code_runner(None)
    way_out = "pass --no-sandbox to run them without one (only for models you trust)"
    what = f"the programs {benchmark.name} generates and runs"
    try:
        sandbox = resolve_sandbox(kind, CODE_LIMITS, protected_paths(), purpose=(what, way_out))
    except ConfigError as exc:
        raise SandboxRequiredError(exc.reason) from exc
    return code_runner(sandbox)


def run_eval(args: EvalArgs, console: Console, err_console: Console) -> None:
    _check_json_target(args.json_path)
    ref = parse_ref(args.model)  # fail fast on a bad ref, before loading anything
    if args.engine == "llamacpp" and ref.scheme not in ("gguf", "bundled", "hf"):
        raise ConfigError(
            f"--engine {args.engine} runs GGUF files (gguf: and bundled: refs) and LoRA "
            f"adapters on them (hf:), not {ref.scheme}:"
        )
    settings = get_settings()
    datasets_dir = args.datasets_dir or settings.datasets_dir
    api_key = SecretStr(args.api_key) if args.api_key else settings.openai_api_key
    context = BenchmarkContext(datasets_dir, args.shots, args.max_new_tokens)
    with err_console.status(f"Loading benchmark {escape(args.benchmark)}…"):
        benchmark = load_benchmark(args.benchmark, context)
        if runs_code(benchmark):  # again, with what runs its programs
            executor = code_executor(benchmark, args.sandbox)
            benchmark = load_benchmark(args.benchmark, replace(context, executor=executor))
    options = BackendOptions(
        device=args.device,
        dtype=args.dtype,
        allow_pickle=args.allow_pickle,
        trust_remote_code=args.trust_remote_code,
        cache_dir=args.cache_dir or settings.cache_dir,
        api_key=api_key,
        max_concurrency=args.concurrency,
        threads=args.threads,
        engine=args.engine,
    )
    loading = f"Loading model {escape(ref.canonical())}…"
    engine = args.engine
    if engine == "auto":
        engine = "llamacpp" if "llamacpp" in available_engines() else "transformers"
    if engine == "transformers" and ref.scheme in ("gguf", "bundled"):
        loading += " (a GGUF file is converted once)"
    with err_console.status(loading):
        backend = load_backend(ref, options)
    config = EvalConfig(
        args.samples,
        args.seed,
        args.batch_size,
        args.prompt_style,
        carbon_intensity=settings.carbon_intensity,
    )
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=False,
        ) as bar:
            label = escape(f"{benchmark.name} × {backend.info.backend}")
            task = bar.add_task(label, total=args.samples)
            result = evaluate(benchmark, backend, config, lambda k: bar.advance(task, k))
    finally:
        backend.close()
    print_result(console, result, args.show_samples)
    if args.json_path is not None:
        _save(args.json_path, result)
        err_console.print(f"wrote {escape(args.json_path)}")
