"""The pages: ``/``, ``/models/{id}``, ``/compare``, ``/tasks``, ``/runners``,
``/methodology``, plus ``/static`` and the leaderboard's refresh fragment
(``/submit`` is ``submit.py``'s).

Every table page also answers ``?format=json`` and ``?format=csv``. Page state lives
in the query string, so every view is a shareable URL and works without JavaScript.
Errors from the services become an HTML page (``error.html``) with the status the
JSON API would give.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from quorumbench.errors import ConfigError, NotFoundError, QuorumError
from quorumbench.services import tasks
from quorumbench.services.board import MODEL_TYPES, BoardPage, BoardQuery, board, paged
from quorumbench.services.context import ServerContext
from quorumbench.services.edge_board import model_edge
from quorumbench.services.efficiency import by_model, overview
from quorumbench.services.views.compare import compare
from quorumbench.services.views.model import model_view
from quorumbench.services.views.runners import runner_list
from quorumbench.services.views.tasks import task_detail, task_list
from quorumbench.web import data
from quorumbench.web.render import STATIC_DIR, Links, default_order, render
from quorumbench.web.session import viewer

router = APIRouter(include_in_schema=False)
router.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
LINKS = Links()
Format = Literal["html", "json", "csv"]
REFRESH_SECONDS = 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def _ctx(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


def parse_size(text: str | None) -> int | None:
    """``"135M"``, ``"7B"``, ``"1.5b"`` or a plain count; None for empty."""
    if text is None or not text.strip():
        return None
    match = _SIZE.match(text)
    if match is None:
        raise ConfigError(f"cannot read {text!r} as a size; write e.g. 500M or 7B")
    return int(float(match[1]) * _UNITS[match[2].lower()])


def page_html(request: Request, template: str, **context: Any) -> str:
    """A whole page: ``template`` with who is signed in, for the header."""
    return render(template, LINKS, viewer=viewer(request), **context)


def html_page(
    html: str, status_code: int = 200, headers: dict[str, str] | None = None
) -> HTMLResponse:
    """A page's answer. Its header names who is signed in, so it varies with the cookie
    (``Vary: Cookie``: a shared cache never gives one person's page to another)."""
    return HTMLResponse(
        html, status_code=status_code, headers={"Vary": "Cookie", **(headers or {})}
    )


ERROR_TITLES = {401: "Sign in first", 403: "Not allowed", 404: "Not found"}


def error_page(status: int, detail: str, request: Request | None = None) -> HTMLResponse:
    """The HTML error page: 404 "Not found", 401 "Sign in first", 403 "Not allowed",
    else "Cannot show this page"; with ``request``, its header names who is signed in."""
    title = ERROR_TITLES.get(status, "Cannot show this page")
    signed_in = None
    if request is not None:
        try:
            signed_in = viewer(request)
        except QuorumError:  # the database is down: the page says what failed anyway
            signed_in = None
    html = render(
        "error.html",
        LINKS,
        title=title,
        detail=detail,
        status=status,
        viewer=signed_in,
        active=None,
    )
    return html_page(html, status_code=status)


def _page(request: Request, build: Callable[[], Response]) -> Response:
    """``build()``, or the error page for a QuorumError it raises."""
    try:
        return build()
    except QuorumError as exc:
        return error_page(404 if isinstance(exc, NotFoundError) else 400, exc.message, request)


def _csv(text: str, name: str) -> Response:
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


def _board_query(
    benchmark: str | None,
    sort: str,
    order: str | None,
    q: str | None,
    type: str | None,
    min_params: str | None,
    max_params: str | None,
    license: str | None,
    page: int,
    per_page: int,
) -> tuple[BoardQuery, dict[str, Any]]:
    """The service query and the non-default parameters (the page's URL state)."""
    descending = (order or default_order(sort)) == "desc"
    query = BoardQuery(
        benchmark=benchmark or None,
        sort=sort,
        descending=descending,
        q=q or None,
        type=type or None,
        min_params=parse_size(min_params),
        max_params=parse_size(max_params),
        license=license or None,
        page=page,
        per_page=per_page,
    )
    state = {
        "q": q,
        "benchmark": benchmark,
        "type": type,
        "min_params": min_params,
        "max_params": max_params,
        "license": license,
        "sort": None if sort == "rank" else sort,
        "order": order if order and order != default_order(sort) else None,
        "per_page": per_page if per_page != 50 else None,
        "page": page if page > 1 else None,
    }
    return query, {k: v for k, v in state.items() if v not in (None, "")}


def sort_state(state: dict[str, Any], query: BoardQuery) -> Callable[[str], dict[str, Any]]:
    """For a column: the URL state that sorts by it (flipping the order if it is current)."""

    def for_column(column: str) -> dict[str, Any]:
        if column == query.sort:
            order = "asc" if query.descending else "desc"
        else:
            order = default_order(column)
        return {
            **state,
            "sort": None if column == "rank" else column,
            "order": None if order == default_order(column) else order,
            "page": None,
        }

    return for_column


def _count_text(page: BoardPage) -> str:
    text = f"{page.total} model{'' if page.total == 1 else 's'}"
    return text + (f" · page {page.query.page} of {page.pages}" if page.pages > 1 else "")


@router.get("/")
def leaderboard_page(
    request: Request,
    benchmark: str | None = None,
    sort: str = "rank",
    order: Literal["asc", "desc"] | None = None,
    q: str | None = Query(None, max_length=100),
    type: str | None = None,
    min_params: str | None = Query(None, max_length=20),
    max_params: str | None = Query(None, max_length=20),
    license: str | None = Query(None, max_length=64),
    page: int = Query(1, ge=1),
    per_page: int = Query(50, ge=1, le=1000),
    format: Format = "html",
    fragment: bool = False,
    efficiency: str | None = Query(None, max_length=200),
) -> Response:
    """The leaderboard; ``fragment=1`` gives the table body as JSON (auto-refresh).
    ``efficiency=<hardware class>`` adds that class's measured efficiency columns to
    the page and its JSON and CSV (services/efficiency.py): shown beside the ranking,
    never used for it."""

    def build() -> Response:
        query, state = _board_query(
            benchmark, sort, order, q, type, min_params, max_params, license, page, per_page
        )
        shown = board(_ctx(request), query)
        columns: data.Measured | None = None
        if efficiency:
            state["efficiency"] = efficiency
            columns = data.Measured(efficiency, by_model(overview(_ctx(request)), efficiency))
        measured = columns.figures if columns else None
        if format == "json":
            return JSONResponse(data.board_dict(shown, columns))
        if format == "csv":
            return _csv(data.board_csv(shown, columns), "leaderboard")
        if fragment:
            rows = render("_board_rows.html", LINKS, page=shown, measured=measured)
            return JSONResponse({"html": rows, "count": _count_text(shown)})
        return html_page(
            page_html(
                request,
                "leaderboard.html",
                page=shown,
                state=state,
                types=MODEL_TYPES,
                sort_state=sort_state(state, shown.query),
                measured=measured,
                efficiency_class=efficiency or None,
                quorum=_ctx(request).settings.quorum,
                refresh_url=LINKS.home(**state, fragment=1),
                data_path=LINKS.home(**state),
                active="board",
            )
        )

    return _page(request, build)


@router.get("/models/{model_id}")
def model_page(request: Request, model_id: int, format: Format = "html") -> Response:
    def build() -> Response:
        view = model_view(_ctx(request), model_id)
        if format == "csv":
            rows = data.model_csv_rows(view)
            return _csv(data.to_csv(data.MODEL_CSV_COLUMNS, rows), f"model-{model_id}")
        measured = overview(_ctx(request), model_id=model_id).figures
        edge = model_edge(_ctx(request), model_id)
        if format == "json":
            return JSONResponse(data.model_dict(view, measured, edge.rows))
        return html_page(
            page_html(
                request,
                "model.html",
                m=view,
                efficiency=measured,
                edge=edge,
                data_path=f"/models/{model_id}",
                active="board",
            )
        )

    return _page(request, build)


@router.get("/compare")
def compare_page(
    request: Request,
    models: Annotated[list[str] | None, Query(description="ID,ID,... or repeated")] = None,
    format: Format = "html",
) -> Response:
    def build() -> Response:
        view, error = None, None
        parts = ",".join(models or []).split(",")
        param = ",".join(part.strip() for part in parts if part.strip())
        if len(param) > 100:
            raise ConfigError("models=ID,ID,...: name two to four models")
        if param:
            try:
                ids = [int(part) for part in param.split(",")]
            except ValueError:
                raise ConfigError("models=ID,ID,...: model ids are numbers") from None
            if len(set(ids)) == 1 and format == "html":  # from a model page's link
                error = "Add one to three more model ids, separated by commas."
            else:
                view = compare(_ctx(request), ids)
        elif format != "html":
            raise ConfigError("name two to four models: models=ID,ID,...")
        if view is not None and format == "json":
            return JSONResponse({"rows": data.compare_rows(view)})
        if view is not None and format == "csv":
            return _csv(data.to_csv(data.COMPARE_CSV_COLUMNS, data.compare_rows(view)), "compare")
        return html_page(
            page_html(
                request,
                "compare.html",
                view=view,
                error=error,
                models_param=param,
                data_path=f"/compare?models={param}",
                active=None,
            )
        )

    return _page(request, build)


@router.get("/tasks")
def tasks_page(
    request: Request,
    status: str | None = None,
    before: int | None = Query(None, ge=1),
    limit: int = Query(50, ge=1, le=500),
    format: Format = "html",
    fragment: bool = False,
) -> Response:
    """Tasks, newest first; ``fragment=1`` gives the table body as JSON (auto-refresh)."""

    def build() -> Response:
        found = task_list(_ctx(request), status=status or None, limit=limit, before_id=before)
        if fragment:
            html = render("_tasks_rows.html", LINKS, tasks=found, show_model=True)
            return JSONResponse({"html": html})
        rows = [data.task_dict(t) for t in found]
        if format == "json":
            return JSONResponse({"tasks": rows})
        if format == "csv":
            for row in rows:
                row["runners"] = " ".join(map(str, row["runners"]))
                row["outliers"] = " ".join(map(str, row["outliers"]))
                row["runner_names"] = " ".join(row["runner_names"])
            return _csv(data.to_csv(list(rows[0]) if rows else ["id"], rows), "tasks")
        chosen = (("status", status), ("before", before), ("limit", limit if limit != 50 else None))
        params: dict[str, Any] = {k: v for k, v in chosen if v}
        query = f"?{urlencode(params)}" if params else ""
        return html_page(
            page_html(
                request,
                "tasks.html",
                tasks=found,
                status=status or None,
                statuses=tasks.STATUSES,
                next_before=found[-1].id if len(found) == limit else None,
                data_path=f"/tasks{query}",
                refresh_url="/tasks?" + urlencode({**params, "fragment": 1}),
                active="tasks",
            )
        )

    return _page(request, build)


@router.get("/tasks/{task_id}")
def task_page(request: Request, task_id: int, format: Format = "html") -> Response:
    def build() -> Response:
        detail = task_detail(_ctx(request), task_id)
        if format == "json":
            return JSONResponse(jsonable_encoder(data.task_detail_dict(detail)))
        if format == "csv":
            rows = data.sample_rows(detail)
            return _csv(data.to_csv(list(rows[0]) if rows else ["sample"], rows), f"task-{task_id}")
        return html_page(
            page_html(
                request,
                "task.html",
                t=detail.task,
                detail=detail,
                data_path=f"/tasks/{task_id}",
                active="tasks",
            )
        )

    return _page(request, build)


@router.get("/runners")
def runners_page(
    request: Request,
    q: str | None = Query(None, max_length=100),
    page: int = Query(1, ge=1),
    per_page: int = Query(100, ge=1, le=1000),
    format: Format = "html",
) -> Response:
    """Runners, most results first; ``q`` searches runner and account names."""

    def build() -> Response:
        runners = runner_list(_ctx(request))
        if q:
            needle = q.lower()
            runners = [r for r in runners if needle in f"{r.account}/{r.name}".lower()]
        shown, number, pages = paged(runners, page, per_page)
        rows = [data.runner_dict(r) for r in shown]
        if format == "json":
            return JSONResponse(
                {"total": len(runners), "page": number, "pages": pages, "runners": rows}
            )
        if format == "csv":
            return _csv(data.to_csv(list(rows[0]) if rows else ["id"], rows), "runners")
        state = {"q": q or None, "per_page": per_page if per_page != 100 else None}
        state = {k: v for k, v in state.items() if v}

        def at(n: int) -> str:
            query = urlencode({**state, **({"page": n} if n > 1 else {})})
            return "/runners" + (f"?{query}" if query else "")

        return html_page(
            page_html(
                request,
                "runners.html",
                runners=shown,
                total=len(runners),
                q=q or "",
                page=number,
                pages=pages,
                prev_url=at(number - 1) if number > 1 else None,
                next_url=at(number + 1) if number < pages else None,
                data_path=at(number),
                active="runners",
            )
        )

    return _page(request, build)


@router.get("/methodology")
def methodology_page(request: Request) -> Response:
    settings = _ctx(request).settings
    return html_page(
        page_html(request, "methodology.html", settings=settings, active="methodology")
    )
