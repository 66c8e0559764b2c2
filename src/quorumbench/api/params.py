"""Unknown query parameters on the JSON API are refused, not ignored.

``GET /v0/tasks?model=2`` (the parameter is ``model_id``) would otherwise answer
with every task, as if the filter had been applied. :class:`UnknownParams` answers
400 ``/problems/unknown-parameter`` instead, naming the unknown parameters
(``unknown``) and what the endpoint accepts (``allowed``). It covers every route
under ``/v0``: each route's allowed names are its declared query parameters, its
dependencies' included, read once from FastAPI's dependency tree. The web pages
(outside ``/v0``) validate their own parameters, and the OAuth callback is left
open: a provider may add parameters of its own (``error_description``,
``error_uri``, ``iss``, ...) to the URL it sends the browser back to.

The module also holds the bound of every integer parameter (:data:`MAX_INT`, and
:data:`RowId` for ids in a path), so that no number is too large to look up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Request
from fastapi.dependencies.models import Dependant
from pydantic import AliasChoices, BaseModel
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from quorumbench.api.problems import problem
from quorumbench.api.routing import route_contexts, route_path
from quorumbench.protocol import MAX_ID
from quorumbench.services.idempotency import KEY_PATTERN

API_PREFIX = "/v0"
MAX_INT = MAX_ID
"""The largest id, count or offset a query can name: the database keeps them as 32-bit
integers (PostgreSQL ``integer``), so nothing larger names a row, and SQLite cannot
even compare a column with a number past 64 bits. Every integer parameter has it as
its bound (``le``), declared in the OpenAPI document."""
PLAIN_TEXT = r"^[^\x00-\x1f\x7f]*$"
"""Free text in a query (a search): anything but control characters, which no name
holds and PostgreSQL cannot even compare (NUL)."""
RowId = Annotated[int, Path(ge=1, le=MAX_INT, description="An id (from 1, a 32-bit integer).")]
"""An id in a path; a number no row can have is refused (422), not looked up."""
OPEN_ROUTES = frozenset({"oauth_callback"})
"""Routes (by name) that take whatever query parameters they are sent."""


@dataclass(frozen=True)
class RouteParams:
    """What one API route accepts: its path, methods and query parameter names."""

    path: str
    """As the OpenAPI document names it (``/v0/tasks/{task_id}``)."""
    path_regex: re.Pattern[str]
    methods: frozenset[str]
    allowed: tuple[str, ...]
    open: bool


def _field_names(field: Any) -> list[str]:
    """The query names one declared parameter answers to (a parameter model's fields
    each count; FastAPI reads them from the query string one by one)."""
    annotation = getattr(field.field_info, "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        names: list[str] = []
        for name, info in annotation.model_fields.items():
            names.extend(_names(name, info))
        return names
    return _names(field.name, field.field_info, alias=field.alias)


def _names(name: str, info: Any, alias: str | None = None) -> list[str]:
    choices = info.validation_alias
    if isinstance(choices, AliasChoices):
        return [c for c in choices.choices if isinstance(c, str)]
    if isinstance(choices, str):
        return [choices]
    return [alias or info.alias or name]


def _query_fields(dependant: Dependant) -> Iterator[Any]:
    """The route's query parameters and those of its dependencies, depth first."""
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_fields(sub)


def _accepts_extra(field: Any) -> bool:
    annotation = getattr(field.field_info, "annotation", None)
    return (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and annotation.model_config.get("extra") == "allow"
    )


def api_routes(app: FastAPI) -> list[RouteParams]:
    """The routes under ``/v0`` in matching order, with what each accepts."""
    routes: list[RouteParams] = []
    for route in route_contexts(app):
        path = getattr(route, "path", None) or ""
        dependant = getattr(route, "dependant", None)
        if not isinstance(dependant, Dependant) or not (
            path == API_PREFIX or path.startswith(f"{API_PREFIX}/")
        ):
            continue
        fields = list(_query_fields(dependant))
        names = dict.fromkeys(n for f in fields for n in _field_names(f))
        routes.append(
            RouteParams(
                path=route.path_format,
                path_regex=route.path_regex,
                methods=frozenset(route.methods or ()),
                allowed=tuple(names),
                open=route.name in OPEN_ROUTES or any(_accepts_extra(f) for f in fields),
            )
        )
    return routes


def matching_route(routes: Sequence[RouteParams], method: str, path: str) -> RouteParams | None:
    """The route the router will run for ``method path`` (the first whose path and
    method match, as the router picks it); None when the router answers 404 or 405."""
    for route in routes:
        if method in route.methods and route.path_regex.match(path):
            return route
    return None


def _detail(unknown: list[str], allowed: tuple[str, ...]) -> str:
    names = ", ".join(repr(n) for n in unknown)
    noun = "parameter" if len(unknown) == 1 else "parameters"
    accepts = (
        f"this endpoint accepts {', '.join(allowed)}"
        if allowed
        else "this endpoint takes no query parameters"
    )
    return f"unknown query {noun} {names}; {accepts}"


class UnknownParams:
    """ASGI middleware: a request under ``/v0`` with a query parameter its route does
    not declare gets 400 problem+json before the route runs."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._routes: list[RouteParams] | None = None

    def routes(self) -> list[RouteParams]:
        # Built on the first request that needs it (every route is added by then),
        # then kept: no request recomputes a route's names.
        if self._routes is None:
            self._routes = api_routes(self.api)
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            path = route_path(scope)
            if path == API_PREFIX or path.startswith(f"{API_PREFIX}/"):
                route = matching_route(self.routes(), scope["method"], path)
                if route is not None and not route.open:
                    given = QueryParams(scope["query_string"])
                    unknown = [k for k in dict.fromkeys(given.keys()) if k not in route.allowed]
                    if unknown:
                        response = problem(
                            Request(scope),
                            400,
                            "unknown-parameter",
                            "Unknown parameter",
                            _detail(unknown, route.allowed),
                            unknown=unknown,
                            allowed=list(route.allowed),
                        )
                        await response(scope, receive, send)
                        return
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    """Refuse unknown query parameters on every route of ``app`` under ``/v0``."""
    app.add_middleware(UnknownParams, api=app)


IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=KEY_PATTERN,
        description="A key of your choosing (1 to 64 of A-Z a-z 0-9 _ . : -, e.g. a UUID): "
        "a retry of the same request with the same key does nothing again and answers "
        "what the first one made (``Idempotent-Replayed: true``); the key with another "
        "request is 422 ``idempotency-key-reused``. Keys are per account, kept.",
    ),
]
"""The optional ``Idempotency-Key`` header of requests that move credits
(``services/idempotency.py``)."""
