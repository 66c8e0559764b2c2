"""Edge reports: the server's consistency check and the per-class summary (pure).

A runner's edge report (``protocol.EdgeReport``) carries every measured run and, for
each figure, the mean ± sd over them. :func:`report_problems` recomputes the figures
from the runs and checks them against the task's workload, as the server does for a
score and its per-sample scores: a report whose figures do not follow from its own runs
is refused. It cannot prove the runs were measured honestly (nothing can, on someone
else's machine); several runners of one class and their spread are what a reader
weighs (:func:`spread`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.efficiency import mean_sd
from quorumbench.core.signing import result_digest, result_message
from quorumbench.protocol import EdgeReport, EdgeStat

REL_TOLERANCE = 1e-6
"""How far a reported mean or sd may be from the one recomputed from the runs
(relative; floats crossing JSON keep about 15 digits)."""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=1e-12)


def _stat_problem(name: str, reported: EdgeStat | None, values: list[float | None]) -> str | None:
    if any(v is None for v in values):
        if reported is not None:
            return f"{name} is given, but a run has none"
        return None
    known = [v for v in values if v is not None]
    if not all(math.isfinite(v) for v in known):  # a prefill rate over a ttft near 0
        return f"{name} of a run is not a finite number"
    expected = mean_sd(known)
    if reported is None:
        return f"{name} is missing, but every run has one"
    if reported.n != expected.n or not (
        _close(reported.mean, expected.mean) and _close(reported.sd, expected.sd)
    ):
        return (
            f"{name} is {reported.mean:g} ± {reported.sd:g} (n={reported.n}); its runs give "
            f"{expected.mean:g} ± {expected.sd:g} (n={expected.n})"
        )
    return None


def _prefill(prompt_tokens: int | None, ttft_s: float | None) -> float | None:
    if prompt_tokens is None or ttft_s is None or not ttft_s > 0:
        return None
    return prompt_tokens / ttft_s


def report_problems(
    report: EdgeReport, task_id: int, edge_version: int, workload: Mapping[str, Any]
) -> list[str]:
    """What is wrong with ``report`` for the edge task ``task_id`` of that workload
    version and settings (its benchmark's config); empty when nothing is."""
    problems = []
    if report.task_id != task_id:
        problems.append(f"task_id {report.task_id} is not this lease's task {task_id}")
    if report.edge_version != edge_version:
        problems.append(
            f"edge_version is {report.edge_version}, the task's workload is {edge_version}"
        )
    settings = report.settings.model_dump(mode="json")
    if {k: float(v) for k, v in settings.items()} != {k: float(v) for k, v in workload.items()}:
        problems.append(f"settings {settings} are not the task's {dict(workload)}")
    runs = report.runs
    low, high = int(workload["min_runs"]), int(workload["max_runs"])
    if not low <= len(runs) <= high:
        problems.append(f"{len(runs)} runs; the task's repeat rule gives {low} to {high}")
    wanted = workload["prompt_tokens"]
    if any(r.prompt_tokens is not None and r.prompt_tokens != wanted for r in runs):
        problems.append(f"a run read other than the task's {wanted} prompt tokens")
    figures: list[tuple[str, EdgeStat | None, list[float | None]]] = [
        ("wall_s", report.wall_s, [r.wall_s for r in runs]),
        ("generated_tokens", report.generated_tokens, [float(r.generated_tokens) for r in runs]),
        ("ttft_s", report.ttft_s, [r.ttft_s for r in runs]),
        ("decode_tokens_per_s", report.decode_tokens_per_s, [r.decode_tokens_per_s for r in runs]),
        (
            "prefill_tokens_per_s",
            report.prefill_tokens_per_s,
            [_prefill(r.prompt_tokens, r.ttft_s) for r in runs],
        ),
    ]
    for name, reported, values in figures:
        if (problem := _stat_problem(name, reported, values)) is not None:
            problems.append(problem)
    for name in ("peak_rss_bytes", "peak_gpu_bytes"):
        known = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        if getattr(report, name) != (max(known) if known else None):
            problems.append(f"{name} is not the highest of its runs'")
    forced = all(r.generated_tokens == workload["gen_tokens"] for r in runs)
    if report.forced_length != forced:
        problems.append("forced_length does not match the runs' generated tokens")
    return problems


@dataclass(frozen=True)
class Spread:
    """One figure over several reports of a hardware class: the median of their means,
    the lowest and highest, and how many reports had it."""

    median: float
    low: float
    high: float
    n: int


def spread(values: Sequence[float | None]) -> Spread | None:
    """:class:`Spread` of the values that are given; None when none is."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return Spread(float(statistics.median(known)), min(known), max(known), len(known))


def check_edge_reports(
    entries: Sequence[Mapping[str, Any]], verify: Callable[[bytes, str, str], bool]
) -> tuple[list[str], int]:
    """Check the closed edge tasks of a downloaded log (rows ``{"index", "entry"}``):
    each report is a valid report of its task whose figures follow from its runs, hashes
    to its ``payload_sha256``, and carries its runner's signature over the message of
    ``core/signing.py``. ``verify(message, signature_hex, public_key_hex)`` checks a
    signature. Returns the problems (each naming its entry and report) and how many
    signatures were checked."""
    problems: list[str] = []
    checked = 0
    for row in entries:
        record = row.get("entry")
        if not isinstance(record, Mapping) or "edge" not in record:
            continue
        task = record["edge"]["task"]
        bench = task["benchmark"]
        for item in record["edge"]["reports"]:
            where = f"entry {row.get('index')}, edge report {item.get('id')}"
            try:
                report = EdgeReport.model_validate(item["report"])
            except ValidationError as exc:
                problems.append(f"{where}: not an edge report ({exc.errors()[0]['msg']})")
                continue
            found = report_problems(report, task["id"], bench["version"], bench["config"])
            problems += [f"{where}: {what}" for what in found]
            digest = result_digest(report)
            if digest != item["payload_sha256"]:
                problems.append(f"{where}: its report does not hash to its payload_sha256")
                continue
            sig = item.get("signature")
            if sig is None:
                continue
            checked += 1
            message = result_message(
                task_id=task["id"],
                lease_id=item["lease_id"],
                attempt=item["attempt"],
                model_ref=task["model"]["ref"],
                benchmark=bench["name"],
                benchmark_version=bench["version"],
                dataset_sha256=bench["dataset_sha256"],
                result_sha256=digest,
                signed_at=sig["signed_at"],
            )
            if sha256_hex(bytes.fromhex(sig["public_key"])) != sig["key_id"]:
                problems.append(f"{where}: key id is not the hash of the public key")
            elif not verify(message, sig["value"], sig["public_key"]):
                problems.append(f"{where}: the runner's signature does not verify")
    return problems, checked
