"""The app's routes as the router sees them, for answers that depend on every route.

FastAPI includes routers lazily, so ``app.routes`` holds the included routers rather
than their routes; :func:`route_contexts` resolves them. :func:`allowed_methods` is
what a ``405 Method Not Allowed`` names in its ``Allow`` header (RFC 9110): every
method that some route serves at the path, not only those of the first route whose
path matched (GET and POST of ``/v0/models`` are two routes).
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Scope


def route_contexts(app: ASGIApp) -> list[Any]:
    """Every route of ``app`` with its full path (included routers resolved)."""
    routes = list(getattr(app, "routes", ()))
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before routers were included lazily: plain routes
        return routes
    return list(iter_route_contexts(routes))


def allowed_methods(app: ASGIApp, path: str) -> list[str]:
    """The methods ``app`` serves at ``path`` (a path the router matched, without the
    ``root_path``), sorted; empty when no route has that path."""
    methods: set[str] = set()
    for route in route_contexts(app):
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path):
            methods.update(route.methods or ())
    return sorted(methods)


def route_path(scope: Scope) -> str:
    """The path the router matches: without the ``root_path`` the app is mounted under."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(f"{root}/"):
        return path[len(root) :]
    return path
