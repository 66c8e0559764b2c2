"""A submission's validation report for people: its findings as a table, what was
read from the model, and one line that says whether it may register.

The report is the service's (``services/submissions/report.py``), whether it was made
here or answered by a server; ``--json`` prints it as it is instead.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell

if TYPE_CHECKING:
    from quorumbench.services.submissions import SubmissionReport

LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def findings_table(report: SubmissionReport, title: str) -> Table:
    table = Table(title=Text(title), title_justify="left")
    table.add_column("level")
    table.add_column("code")
    table.add_column("field")
    table.add_column("message", overflow="fold")
    for found in report.findings:
        table.add_row(
            Text(found.level, style=LEVEL_STYLE[found.level]),
            cell(found.code),
            cell(found.field or ""),
            cell(found.message),
        )
    return table


def metadata_table(report: SubmissionReport) -> Table | None:
    meta = report.metadata
    if meta is None:
        return None
    table = Table(title="read from the model", show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    size = f"{meta.effective_params:,}" if meta.effective_params is not None else "unknown"
    rows = {
        "pinned ref": meta.ref,
        "name": meta.name,
        "family": meta.family or "",
        "kind": meta.kind,
        "parameters": size + (" (estimated)" if meta.params_estimated else ""),
        "architecture": meta.architecture or "",
        "licence": meta.license or "not found",
    }
    for key, value in rows.items():
        table.add_row(key, cell(value))
    return table


def summary(report: SubmissionReport) -> Text:
    errors = sum(1 for f in report.findings if f.level == "error")
    warnings = sum(1 for f in report.findings if f.level == "warning")
    plural = "s" if warnings != 1 else ""
    if errors:
        return Text.assemble(
            ("refused", "bold red"),
            f": {errors} error{'s' if errors != 1 else ''}, {warnings} warning{plural}",
        )
    return Text.assemble(("ok", "bold green"), f": no error, {warnings} warning{plural}")


def print_report(console: Console, report: SubmissionReport, title: str) -> None:
    console.print(findings_table(report, title))
    meta = metadata_table(report)
    if meta is not None:
        console.print(meta)
    console.print(summary(report), highlight=False)


def print_json(console: Console, document: dict[str, Any]) -> None:
    """The report's JSON, as it is (no markup, no wrapping)."""
    text = json.dumps(document, indent=2, ensure_ascii=False)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
