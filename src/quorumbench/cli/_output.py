"""Rendering run results for people: tables and a one-line summary.

Every cell is a :class:`~rich.text.Text`: refs, names, sample ids and model outputs
are data, and rich would read ``[...]`` in them as markup.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from quorumbench.cli._console import cell
from quorumbench.evaluation.results import RunResult
from quorumbench.protocol import Measurements

MAX_SLICES = 12


def results_table(result: RunResult) -> Table:
    """The headline table of one run."""
    table = Table(title="QuorumBench evaluation", show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    agg = result.aggregate
    correct = sum(1 for s in result.samples if s.correct)
    bench = result.benchmark
    rows = {
        "model": result.model["ref"],
        "benchmark": f"{bench['name']} v{bench['version']} "
        f"(prompt v{bench['prompt_version']}, {bench['prompt_style']})",
        "score": f"{agg.mean:.4f}  (95% CI {agg.ci_low:.3f}–{agg.ci_high:.3f})",
        "samples": f"{result.n}  ({correct} correct, seed {result.sampling['seed']!r})",
        "runtime": f"{result.runtime_s:.2f} s  ({result.samples_per_s:.2f} samples/s)",
        "tokens/s": f"{result.tokens_per_s:.1f}",
        "predictions sha256": result.predictions_sha256,
        "outputs sha256": result.outputs_sha256,
    }
    rows |= measurement_rows(result.measurements)
    for key, value in rows.items():
        table.add_row(key, cell(value))
    return table


NOT_MEASURED = "not measured"


def _bytes(n: int | None) -> str:
    return NOT_MEASURED if n is None else f"{n / 2**20:,.0f} MiB"


def measurement_rows(m: Measurements | None) -> dict[str, str]:
    """The measurements in words, each with how it was taken; "not measured" for a
    reading the run could not take."""
    if m is None:
        return {"measurements": NOT_MEASURED}
    if m.energy_kwh is None:
        energy = f"{NOT_MEASURED} (method {m.energy_method or 'none'})"
        co2 = NOT_MEASURED
    else:
        energy = f"{m.energy_kwh * 3.6e6:.3g} J = {m.energy_kwh:.3g} kWh  ({m.energy_method}"
        energy += f", {m.energy_scope})" if m.energy_scope else ")"
        co2 = (
            f"{m.co2_g:.3g} g  ({m.carbon_intensity_g_per_kwh:g} g/kWh, "
            f"{m.carbon_intensity_source})"
        )
    tokens = [
        f"{n} {what}"
        for n, what in ((m.prompt_tokens, "prompt"), (m.generated_tokens, "generated"))
        if n is not None
    ]
    return {
        "energy": energy,
        "CO₂": co2,
        "tokens read/made": ", ".join(tokens) or NOT_MEASURED,
        "time to first token": NOT_MEASURED if m.ttft_s is None else f"{m.ttft_s * 1000:.0f} ms",
        "decode": NOT_MEASURED
        if m.decode_tokens_per_s is None
        else f"{m.decode_tokens_per_s:.1f} tokens/s",
        "peak memory": _bytes(m.peak_rss_bytes),
        "peak GPU memory": _bytes(m.peak_gpu_bytes),
    }


def slices_table(result: RunResult) -> Table | None:
    """Score per subject when the run covers more than one subject."""
    subjects = [s for s in result.slices if s.label == "subject"]
    if len(subjects) < 2:
        return None
    table = Table(title="by subject", title_justify="left")
    table.add_column("subject")
    table.add_column("n", justify="right")
    table.add_column("score", justify="right")
    for row in sorted(subjects, key=lambda s: (-s.n, s.value))[:MAX_SLICES]:
        table.add_row(cell(row.value), str(row.n), f"{row.score:.3f}")
    return table


def samples_table(result: RunResult) -> Table:
    """Each sample's prediction and correctness."""
    table = Table(title="samples", title_justify="left")
    for column in ("id", "prediction", "correct", "output"):
        table.add_column(column, overflow="fold")
    for sample in result.samples:
        output = sample.output.replace("\n", "⏎")
        table.add_row(
            cell(sample.id),
            cell(sample.prediction),
            "✓" if sample.correct else "✗",
            cell(output[:80] + ("…" if len(output) > 80 else "")),
        )
    return table


def print_result(console: Console, result: RunResult, show_samples: bool) -> None:
    console.print(results_table(result))
    by_subject = slices_table(result)
    if by_subject is not None:
        console.print(by_subject)
    if show_samples:
        console.print(samples_table(result))


def write_json(path: Path, result: RunResult) -> None:
    """Write the result file atomically (a partial file is never left behind)."""
    payload = json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
