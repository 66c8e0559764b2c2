"""``quorumbench export-site DIR``: a static copy of the leaderboard and model pages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def export_site_command(
    directory: Annotated[
        Path,
        typer.Argument(metavar="DIR", help="Folder to write the site into (created if missing)."),
    ],
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy URL (else QB_DATABASE_URL, else SQLite in the data directory).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Directory of the default SQLite database (QB_DATA_DIR)."),
    ] = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            "--datasets-dir",
            help="Local benchmark data (QB_DATASETS_DIR), for the per-subject tables.",
        ),
    ] = None,
    server_url: Annotated[
        str,
        typer.Option("--server-url", help="The live server's URL, for the submit page."),
    ] = "http://127.0.0.1:8000",
) -> None:
    """Write the leaderboard and model pages (HTML + JSON) as a static site that works
    from any static host or opened from disk."""
    from quorumbench.cli.server_cmd import server_settings
    from quorumbench.services.site import reader_context
    from quorumbench.settings import get_settings
    from quorumbench.web.export import export_site

    datasets = datasets_dir or get_settings().datasets_dir
    ctx = reader_context(server_settings(database_url, data_dir), datasets)
    try:
        summary = export_site(ctx, directory, server_url=server_url)
    finally:
        ctx.close()
    console = Console()
    console.print(
        f"wrote {summary.files} files ({summary.models} model pages) to {summary.directory}; "
        f"open {summary.directory / 'index.html'}"
    )
    if summary.unlabelled:
        console.print(
            f"no per-subject tables for {', '.join(summary.unlabelled)}: their data could not "
            "be loaded here (give --datasets-dir; custom benchmarks are not labelled)"
        )
