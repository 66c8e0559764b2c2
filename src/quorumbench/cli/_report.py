"""A submission report (``services/submissions/report.py``) as tables for people.

The same parts the site shows: the findings (errors first), the metadata read from
the model, the account's quota, the cost estimate (an estimate, said so) and a
registered model the ref duplicates, with its page's URL on the server. A report made
here without a server (``services/submissions/offline.py``) has no quota: one line
says that the account's limits were not checked.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.errors import RegistrationError
from quorumbench.services.quota import QuotaStatus
from quorumbench.services.submissions.report import (
    CostEstimate,
    DetectedMetadata,
    ExistingModel,
    SubmissionReport,
)

LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _count(value: int | None, estimated: bool = False) -> str:
    if value is None:
        return "unknown"
    return f"{value:,}" + (" (estimated)" if estimated else "")


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _key_values(title: str, rows: dict[str, object]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in rows.items():
        table.add_row(key, cell("—" if value is None else value))
    return table


def findings_table(report: SubmissionReport) -> Table:
    """The findings; a ``field`` column when one names the field it is about."""
    fields = any(finding.field for finding in report.findings)
    table = Table(title="findings", title_justify="left")
    table.add_column("level")
    table.add_column("code")
    if fields:
        table.add_column("field")
    table.add_column("finding", overflow="fold")
    for finding in report.findings:
        where = [cell(finding.field or "")] if fields else []
        table.add_row(
            Text(finding.level, style=LEVEL_STYLE.get(finding.level, "")),
            cell(finding.code),
            *where,
            cell(finding.message),
        )
    return table


def metadata_table(meta: DetectedMetadata) -> Table:
    return _key_values(
        "detected metadata",
        {
            "ref": meta.ref,
            "revision": meta.revision,
            "name": meta.name,
            "family": meta.family,
            "kind": meta.kind,
            "parameters": _count(meta.params, meta.params_estimated),
            "effective parameters": _count(meta.effective_params, meta.params_estimated),
            "architecture": meta.architecture,
            "context length": meta.context_length,
            "dtype": meta.dtype,
            "quantization": meta.quantization,
            "license": meta.license,
            "base model": meta.base_model,
            "weights sha256": meta.weights_sha256,
        },
    )


def quota_table(quota: QuotaStatus) -> Table:
    if quota.exempt:
        counted: object = "exempt (admin)"
        weekly: object = "exempt (admin)"
    else:
        counted = (
            f"{quota.accepted_evaluations} of {quota.quota_evaluations} accepted evaluations "
            f"counted in the last {quota.window_hours} h; still owed: "
            f"{quota.evaluations_needed}"
        )
        weekly = f"{quota.registrations_last_7_days} of {quota.registrations_per_week}"
    rows: dict[str, object] = {
        "quota": counted,
        "registrations (7 days)": weekly,
        "may register now": "yes" if quota.can_register else "no",
    }
    if quota.next_registration_in_s is not None:
        rows["next registration in"] = f"{quota.next_registration_in_s} s"
    return _key_values("quota", rows)


def estimate_table(estimate: CostEstimate) -> Table:
    table = Table(
        title="cost estimate (an estimate, not a measurement: one epoch of first tasks, "
        "per runner)",
        title_justify="left",
    )
    for column in ("benchmark", "kind", "samples", "CPU s", "GPU s"):
        table.add_column(column, justify="left" if column in ("benchmark", "kind") else "right")
    for bench in estimate.benchmarks:
        table.add_row(
            cell(bench.name),
            cell(bench.kind),
            str(bench.samples),
            _seconds(bench.cpu_seconds),
            _seconds(bench.gpu_seconds),
        )
    table.add_row(
        "total", "", str(estimate.samples), _seconds(estimate.cpu_seconds),
        _seconds(estimate.gpu_seconds), style="bold",
    )  # fmt: skip
    table.caption = Text(
        f"for {_count(estimate.params)} parameters on {estimate.reference_cpu} (CPU) and "
        f"{estimate.reference_gpu} (GPU); each task is run by {estimate.quorum} runners. "
        f"{estimate.method}"
    )
    table.caption_justify = "left"
    return table


QUOTA_UNCHECKED = (
    "quota: the account's limits (quota, weekly registrations) were not checked: no server "
    "was asked"
)


def existing_line(existing: ExistingModel, server: str | None) -> Text:
    """The registered model the ref duplicates; its page's path alone without a server."""
    whose = "yours" if existing.yours else "another account's"
    retired = ", retired" if existing.retired else ""
    page = f"{server.rstrip('/')}{existing.url}" if server is not None else existing.url
    return Text(
        f"registered already ({whose}{retired}): model {existing.id} {existing.name} "
        f"({existing.ref}) {page}"
    )


def verdict(report: SubmissionReport, server: str | None) -> Text:
    """Whether registering would succeed; without a server, only as far as was checked."""
    if not report.ok:
        return Text("refused: registering it would fail (the errors below)", style="bold red")
    if server is None:
        return Text("accepted by the checks made here (the account's were not made)", "green")
    return Text("accepted: registering it would succeed now", style="green")


def print_report(console: Console, report: SubmissionReport, server: str | None) -> None:
    """Every part of ``report``; ``server`` (None: a report made here, offline) makes
    the duplicate's page a full URL."""
    ref = report.ref or "(none read)"
    console.print(Text.assemble(("ref ", "bold"), ref, ": ", verdict(report, server)))
    if report.pinned_ref and report.pinned_ref != report.ref:
        console.print(Text(f"pinned to {report.pinned_ref}"))
    console.print(findings_table(report))
    if report.metadata is not None:
        console.print(metadata_table(report.metadata))
    if report.quota is None:
        console.print(Text(QUOTA_UNCHECKED))
    else:
        console.print(quota_table(report.quota))
    if report.estimate is not None:
        console.print(estimate_table(report.estimate))
    if report.existing is not None:
        console.print(existing_line(report.existing, server))


def refusal(report: SubmissionReport) -> RegistrationError | None:
    """The error that refuses the registration: the report's first, with its code."""
    found = next((f for f in report.findings if f.level == "error"), None)
    return None if found is None else RegistrationError(found.message, check=found.code)
