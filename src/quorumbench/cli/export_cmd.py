"""``quorumbench export-site DIR``: a static copy of the leaderboard and model pages.

``DIR`` may be new, empty, or an earlier export (it has ``index.html`` and
``leaderboard.json``), which is written over. Any other existing folder is refused
unless ``--force`` is given: the site's files then replace files of the same names
there, and nothing else in it is touched or removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quorumbench.cli._console import escape, make_console
from quorumbench.errors import ConfigError

EXPORT_MARKERS = ("index.html", "leaderboard.json")
"""Files every export writes: a folder holding both is an earlier export."""


def _reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{reason}: {exc.filename}" if exc.filename else reason


def check_target(directory: Path, force: bool) -> None:
    """Refuse a target that is a file, or a folder with other things in it (no --force)."""
    try:
        if directory.exists() and not directory.is_dir():
            raise ConfigError(
                f"{directory} exists and is not a directory: give a new or empty directory "
                "for the site"
            )
        if not directory.is_dir() or force:
            return
        earlier = all((directory / name).is_file() for name in EXPORT_MARKERS)
        if not earlier and any(directory.iterdir()):
            raise ConfigError(
                f"{directory} is not empty and holds no earlier export: give a new or empty "
                "directory, or --force to write the site into it (files of the same names "
                "are replaced; nothing else is removed)"
            )
    except OSError as exc:
        raise ConfigError(f"cannot use {directory} for the site: {_reason(exc)}") from exc


def export_site_command(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="Folder to write the site into: new, empty or an earlier export (created "
            "if missing).",
        ),
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
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into a folder that holds other files (same names are replaced; "
            "nothing is removed).",
        ),
    ] = False,
) -> None:
    """Write the leaderboard and model pages (HTML + JSON) as a static site that works
    from any static host or opened from disk."""
    from quorumbench.cli.server_cmd import server_settings
    from quorumbench.services.wiring import reader_context
    from quorumbench.settings import get_settings
    from quorumbench.web.export import export_site

    check_target(directory, force)
    datasets = datasets_dir or get_settings().datasets_dir
    ctx = reader_context(server_settings(database_url, data_dir), datasets)
    try:
        summary = export_site(ctx, directory, server_url=server_url)
    except OSError as exc:
        raise ConfigError(f"cannot write the site to {directory}: {_reason(exc)}") from exc
    finally:
        ctx.close()
    console = make_console()
    console.print(
        f"wrote {summary.files} files ({summary.models} model pages) to "
        f"{escape(summary.directory)}; open {escape(summary.directory / 'index.html')}"
    )
    if summary.unlabelled:
        console.print(
            f"no per-subject tables for {escape(', '.join(summary.unlabelled))}: their data "
            "could not be loaded here (give --datasets-dir; custom benchmarks are not "
            "labelled)"
        )
