"""``quorumbench edge MODEL_REF``: the edge benchmark on this machine (llama-bench style).

Loads the model as ``quorumbench eval`` does, runs :func:`~quorumbench.evaluation.edge.
run_edge` with a progress bar over the runs, prints mean ± sd of each figure with the
number of runs and the hardware class, and writes the full result as JSON to stdout
(``--json``) or a file (``--output``). Settings, not the figures, are checked first: a
bad option is one line and exit status 1, before any model is loaded.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.cli._console import escape, make_console
from quorumbench.core.efficiency import MeanSd
from quorumbench.errors import ConfigError
from quorumbench.evaluation.edge import EdgeResult, EdgeSettings, run_edge
from quorumbench.evaluation.refs import parse_ref
from quorumbench.settings import get_settings


def _mean_sd(value: MeanSd | None, digits: int) -> str:
    if value is None:
        return "not measured"
    return f"{value.mean:.{digits}f} ± {value.sd:.{digits}f}"


def _mib(value: int | None) -> str:
    return "not measured" if value is None else f"{value / 2**20:,.0f} MiB"


def edge_table(result: EdgeResult) -> Table:
    """The figures as a table: mean ± sd over the runs, their count, the class."""
    n = len(result.runs)
    table = Table(title=escape(f"edge: {result.model['ref']}"), title_justify="left")
    table.add_column("figure")
    table.add_column("mean ± sd", justify="right")
    table.add_column("n", justify="right")
    rows = [
        ("prefill tokens/s", _mean_sd(result.prefill_tokens_per_s, 1)),
        ("decode tokens/s", _mean_sd(result.decode_tokens_per_s, 1)),
        ("time to first token (s)", _mean_sd(result.ttft_s, 4)),
        ("run time (s)", _mean_sd(result.wall_s, 3)),
        ("generated tokens", _mean_sd(result.generated_tokens, 1)),
        ("peak RSS", _mib(result.peak_rss_bytes)),
        ("peak GPU memory", _mib(result.peak_gpu_bytes)),
    ]
    for name, value in rows:
        table.add_row(name, value, str(n))
    s = result.settings
    table.caption = escape(
        f"hardware class {result.hardware_class} · {s.prompt_tokens} prompt tokens, "
        f"{s.gen_tokens} generated, batch 1, {s.warmup} warm-up · device "
        f"{result.model['device']} ({result.model['dtype'] or 'default dtype'})"
    )
    table.caption_justify = "left"
    return table


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (no partial file is left behind)."""
    payload = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"--output {path}: cannot write there: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"--output {path}: cannot write it: {exc.strerror or exc}") from exc


def _check_output(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"--output {path} is a directory; give a file path")
    if not path.parent.is_dir():
        raise ConfigError(f"--output {path}: directory {path.parent} does not exist")


def run_edge_command(
    model: str,
    settings: EdgeSettings,
    options: BackendOptions,
    *,
    as_json: bool,
    output: Path | None,
    console: Console,
    err_console: Console,
) -> EdgeResult:
    """Load ``model``, run the edge benchmark with progress, print and save."""
    _check_output(output)
    ref = parse_ref(model)  # fail fast on a bad ref, before loading anything
    with err_console.status(f"Loading model {escape(ref.canonical())}…"):
        backend = load_backend(ref, options)
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=err_console,
        ) as bar:
            warm = bar.add_task("warm-up", total=settings.warmup, note="")
            runs = bar.add_task("runs", total=settings.min_runs, note="")

            def progress(phase: str, done: int, elapsed_s: float) -> None:
                if phase == "warmup":
                    bar.update(warm, completed=done)
                    return
                total = max(settings.min_runs, done)
                note = f"{elapsed_s:.1f} s of ≥ {settings.min_time_s:g} s"
                bar.update(runs, completed=done, total=total, note=note)

            result = run_edge(backend, settings, progress)
    finally:
        backend.close()
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        console.print(edge_table(result))
        for note in result.notes:
            console.print(f"note: {escape(note)}")
    if output is not None:
        _write(output, result.to_json())
        err_console.print(f"wrote {escape(output)}")
    return result


def edge_command(
    model_ref: Annotated[
        str,
        typer.Argument(
            metavar="MODEL_REF",
            help="Model ref: hf:, gguf:, openai:, bundled: or a plugin's scheme.",
        ),
    ],
    prompt_tokens: Annotated[
        int, typer.Option("--prompt-tokens", help="Prompt length in the model's tokens.")
    ] = 512,
    gen_tokens: Annotated[
        int, typer.Option("--gen-tokens", help="Tokens generated per run (EOS does not stop).")
    ] = 128,
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up runs (not counted).")] = 1,
    min_runs: Annotated[int, typer.Option("--min-runs", help="Measured runs at least.")] = 5,
    min_time: Annotated[
        float, typer.Option("--min-time", help="Seconds of measured runs at least.")
    ] = 10.0,
    max_runs: Annotated[int, typer.Option("--max-runs", help="Measured runs at most.")] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the full result as JSON instead of a table.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the JSON result here.")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    dtype: Annotated[
        str, typer.Option("--dtype", help="auto, float32, bfloat16 or float16.")
    ] = "auto",
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads.")] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Allow pickled .bin weights (can run code).")
    ] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run model code shipped in the repo.")
    ] = False,
) -> None:
    """Measure prefill and decode speed, latency and peak memory on this machine."""
    settings = EdgeSettings(prompt_tokens, gen_tokens, warmup, min_runs, min_time, max_runs)
    app_settings = get_settings()
    options = BackendOptions(
        device=device,
        dtype=dtype,
        allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code,
        cache_dir=app_settings.cache_dir,
        api_key=app_settings.openai_api_key,
        threads=threads,
    )
    run_edge_command(
        model_ref,
        settings,
        options,
        as_json=as_json,
        output=output,
        console=make_console(),
        err_console=make_console(stderr=True),
    )
