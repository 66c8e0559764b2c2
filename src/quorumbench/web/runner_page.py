"""A runner's page, ``/runners/{id}`` (also ``?format=json``): its contributions and its
measurement flags, the latest flagged results with their task, hardware class and
energy per sample beside the class median (``services/views/runner.py``). Flags change
no score, consensus or reputation; the page says so. No JavaScript needed.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from quorumbench.services.views.runner import FlaggedResult, runner_detail
from quorumbench.web import data
from quorumbench.web.routes import _ctx, _page, html_page, page_html

router = APIRouter(include_in_schema=False)


def flagged_dict(flag: FlaggedResult) -> dict[str, Any]:
    out = asdict(flag)
    out["finalized_at"] = flag.finalized_at.isoformat() if flag.finalized_at else None
    out["ratio"] = flag.ratio
    return out


@router.get("/runners/{runner_id}")
def runner_page(
    request: Request, runner_id: int, format: Literal["html", "json"] = "html"
) -> Response:
    """One runner: its contributions and its latest measurement flags."""

    def build() -> Response:
        detail = runner_detail(_ctx(request), runner_id)
        if format == "json":
            return JSONResponse(
                {
                    "runner": data.runner_dict(detail.runner),
                    "measurement_outlier_factor": detail.outlier_factor,
                    "flagged": [flagged_dict(f) for f in detail.flagged],
                }
            )
        return html_page(
            page_html(
                request,
                "runner.html",
                r=detail.runner,
                detail=detail,
                data_path=f"/runners/{runner_id}",
                active="runners",
            )
        )

    return _page(request, build)
