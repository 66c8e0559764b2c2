"""Typer options that several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DatasetsDir = Annotated[
    Path | None,
    typer.Option(
        "--datasets-dir",
        help="Local benchmark data laid out like shared/datasets (else QB_DATASETS_DIR, "
        "else the Hub).",
        file_okay=False,
    ),
]
