"""``quorumbench export-site``: the leaderboard and model pages as a static site.

The same templates as the live pages, with :class:`StaticLinks` (relative ``.html``
links), plus the tables as JSON and our stylesheet and script. The result needs no
server: it works from any static host and opened from disk (``file://``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quorumbench.services.board import MODEL_TYPES, BoardPage, BoardQuery, all_model_ids, board
from quorumbench.services.context import ServerContext
from quorumbench.services.edge_board import model_edge
from quorumbench.services.efficiency import overview
from quorumbench.services.subjects import load_labels
from quorumbench.services.views.model import model_view
from quorumbench.web import data
from quorumbench.web.render import STATIC_DIR, StaticLinks, render


@dataclass(frozen=True)
class ExportSummary:
    directory: Path
    models: int
    files: int
    unlabelled: list[str]
    """Active benchmarks whose data could not be loaded (no subject tables)."""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def full_board(ctx: ServerContext) -> BoardPage:
    """Every leaderboard row in rank order, as one page."""
    first = board(ctx, BoardQuery(per_page=1000))
    rows = list(first.rows)
    for number in range(2, first.pages + 1):
        rows += board(ctx, BoardQuery(per_page=1000, page=number)).rows
    return replace(first, rows=rows, pages=1)


def export_site(ctx: ServerContext, directory: Path, *, server_url: str) -> ExportSummary:
    """Write the site into ``directory`` (created; existing files are overwritten)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(STATIC_DIR, directory / "static", dirs_exist_ok=True)
    exported_at = ctx.now()
    top, down = StaticLinks(0), StaticLinks(1)
    unlabelled = load_labels(ctx)
    everything = full_board(ctx)
    common = {"exported_at": exported_at, "data_path": ""}
    files = 0
    _write(
        directory / "index.html",
        render(
            "leaderboard.html",
            top,
            page=everything,
            state={},
            types=MODEL_TYPES,
            quorum=ctx.settings.quorum,
            refresh_url=None,
            static_json="leaderboard.json",
            static_csv="leaderboard.csv",
            active="board",
            **common,
        ),
    )
    _write(directory / "leaderboard.json", _json(data.board_dict(everything)))
    _write(directory / "leaderboard.csv", data.board_csv(everything))
    files += 3
    for name, extra in (
        ("methodology", {}),
        ("submit", {"server_url": server_url}),
    ):
        html = render(f"{name}.html", top, settings=ctx.settings, active=name, **extra, **common)
        _write(directory / f"{name}.html", html)
        files += 1
    ids = all_model_ids(ctx)
    measured = overview(ctx).figures
    for model_id in ids:
        view = model_view(ctx, model_id)
        figures = [f for f in measured if f.model_id == model_id]
        edge = model_edge(ctx, model_id)
        html = render(
            "model.html",
            down,
            m=view,
            efficiency=figures,
            edge=edge,
            static_json=f"{model_id}.json",
            static_csv=f"{model_id}.csv",
            active="board",
            **common,
        )
        folder = directory / "models"
        _write(folder / f"{model_id}.html", html)
        _write(folder / f"{model_id}.json", _json(data.model_dict(view, figures, edge.rows)))
        _write(
            folder / f"{model_id}.csv",
            data.to_csv(data.MODEL_CSV_COLUMNS, data.model_csv_rows(view)),
        )
        files += 3
    return ExportSummary(directory, len(ids), files, unlabelled)
