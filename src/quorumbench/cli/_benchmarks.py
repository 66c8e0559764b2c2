"""``quorumbench benchmark …`` and ``quorumbench plugins list``."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from quorumbench.backends import BackendStatus
from quorumbench.backends import registry as backend_registry
from quorumbench.benchmarks import DEFAULT_PILLARS, load_benchmark
from quorumbench.benchmarks import registry as benchmark_registry
from quorumbench.benchmarks.custom import load_custom_benchmark, read_spec
from quorumbench.cli._console import cell, escape
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples
from quorumbench.evaluation.registry import PluginStatus
from quorumbench.settings import get_settings

_DESCRIPTIONS = {
    "arith": "generated arithmetic word problems (no data needed)",
    "gsm8k": "GSM8K test, chain-of-thought, exact match on the final number",
    "humaneval": "HumanEval (164 functions), pass@1: the tests run in a sandbox",
    "mbpp": "MBPP full test split (500 problems), 3-shot, pass@1 in a sandbox",
    "truthfulqa-mc1": "TruthfulQA, best answer ranked first (log-likelihood)",
    "truthfulqa-mc2": "TruthfulQA, probability mass on true answers",
    "arc-challenge": "ARC-Challenge test, grade-school science (Hub, acc_norm)",
    "hellaswag": "HellaSwag validation, sentence completion (Hub, acc_norm)",
    "mmlu": "MMLU test, 57 subjects, zero-shot letters (Hub)",
    "boolq": "BoolQ validation, yes/no reading comprehension (Hub)",
    "piqa": "PIQA validation, physical commonsense (Hub, acc_norm)",
    "winogrande": "WinoGrande validation, pronoun resolution (Hub, partial scoring)",
    "bbq": "BBQ, bias in ambiguous and disambiguated contexts (local copy only)",
    "gen-reasoning": "generated ordering puzzles and syllogisms (no data needed)",
    "gen-language": "generated grammaticality minimal pairs (no data needed)",
    "gen-safety": "generated bias and refusal probes (no data needed)",
}


def list_benchmarks(console: Console) -> None:
    table = Table(title="benchmarks", title_justify="left")
    for column in ("name", "pillar", "origin", "description"):
        table.add_column(column)
    for status in benchmark_registry().status():
        description = Text(_DESCRIPTIONS.get(status.name, ""))
        if status.error:
            description = Text(f"failed to load: {status.error}", style="red")
        pillar = DEFAULT_PILLARS.get(status.name, "")
        table.add_row(cell(status.name), cell(pillar), cell(status.origin), description)
    console.print(table)


def _schemes(status: PluginStatus) -> str:
    """A backend's ref schemes (``gguf:, bundled:``), marked when it is a remote endpoint."""
    if not isinstance(status, BackendStatus) or not status.schemes:
        return ""
    schemes = ", ".join(f"{scheme}:" for scheme in status.schemes)
    return f"{schemes} (remote)" if status.remote else schemes


def list_plugins(console: Console) -> None:
    table = Table(title="plugins", title_justify="left")
    for column in ("kind", "name", "schemes", "target", "origin", "status"):
        table.add_column(column)
    statuses: list[tuple[str, list[PluginStatus]]] = [
        ("benchmark", benchmark_registry().status()),
        ("backend", list(backend_registry().status())),
    ]
    for kind, rows in statuses:
        for s in rows:
            state = Text(f"error: {s.error}", style="red") if s.error else Text("ok")
            table.add_row(
                kind, cell(s.name), cell(_schemes(s)), cell(s.target), cell(s.origin), state
            )
    console.print(table)


def validate_spec(path: Path, console: Console) -> None:
    spec = read_spec(path)
    benchmark = load_custom_benchmark(path, BenchmarkContext())
    summary = (
        f"{spec.name} v{spec.version} ({spec.format}): "
        f"{len(benchmark.sample_ids())} samples, data sha256 {spec.data.sha256}"
    )
    console.print(f"[green]ok[/] {escape(summary)}")


def print_sample_ids(name: str, seed: str, n: int, datasets_dir: Path | None) -> None:
    directory = datasets_dir or get_settings().datasets_dir
    benchmark = load_benchmark(name, BenchmarkContext(directory))
    for sample in select_samples(benchmark, n, seed):
        print(sample.id)  # noqa: T201 - plain output for scripts
