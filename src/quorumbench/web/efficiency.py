"""The ``/efficiency`` page: measured efficiency of the models on one hardware class.

Beside the ranking, never in it (services/efficiency.py says why). A GET form picks the
class and links sort the table, so it works without JavaScript; ``?format=json`` and
``?format=csv`` give the same table.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from quorumbench.services.efficiency import (
    DESCENDING,
    SORT_FIELDS,
    check_sort,
    chosen_class,
    csv_text,
    in_class,
    overview,
)
from quorumbench.web.routes import Format, _csv, _ctx, _page, html_page, page_html

router = APIRouter(include_in_schema=False)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "Model"),
    ("n_results", "Results"),
    ("energy_kwh_per_1k", "Energy per 1k samples"),
    ("co2_g_per_1k", "CO₂ per 1k samples"),
    ("ttft_s", "Time to first token"),
    ("decode_tokens_per_s", "Decode speed"),
    ("peak_rss_bytes", "Peak memory"),
    ("peak_gpu_bytes", "Peak GPU memory"),
    ("aggregate", "Aggregate score"),
    ("efficiency", "Efficiency"),
)
"""The table's sortable columns, in order (each a ``SORT_FIELDS`` member)."""
assert {name for name, _ in COLUMNS} == set(SORT_FIELDS)


def url(klass: str | None, sort: str | None, fmt: str | None = None) -> str:
    """The page's URL for a class and sort (defaults left out)."""
    state = {"class": klass, "sort": None if sort == "efficiency" else sort, "format": fmt}
    query = urlencode({k: v for k, v in state.items() if v})
    return "/efficiency" + (f"?{query}" if query else "")


@router.get("/efficiency")
def efficiency_page(
    request: Request,
    klass: str | None = Query(None, alias="class", max_length=200),
    sort: str = Query("efficiency", max_length=40),
    format: Format = "html",
) -> Response:
    """Measured energy, CO₂, latency and memory per model, within one hardware class."""

    def build() -> Response:
        check_sort(sort)
        found = overview(_ctx(request))
        shown = chosen_class(found, klass or None)
        rows = in_class(found, shown, sort)
        if format == "json":
            body: dict[str, Any] = {
                "hardware_class": shown,
                "sort": sort,
                "classes": [asdict(c) for c in found.classes],
                "rows": [asdict(r) for r in rows],
            }
            return JSONResponse(body)
        if format == "csv":
            return _csv(csv_text(rows), "efficiency")
        return html_page(
            page_html(
                request,
                "efficiency.html",
                rows=rows,
                classes=found.classes,
                shown=shown,
                sort=sort,
                columns=COLUMNS,
                descending=DESCENDING,
                sort_url=lambda column: url(shown, column),
                json_url=url(shown, sort, "json"),
                csv_url=url(shown, sort, "csv"),
                api_url="/v0/efficiency?" + urlencode({"class": shown or ""}),
                active="efficiency",
            )
        )

    return _page(request, build)
