"""The test processes share FastAPI's analysis of a route between apps
(``tests/conftest.py``): each app still gets its own routes, with the same answers."""

from __future__ import annotations

from fastapi import routing

from quorumbench.api.app import create_app
from quorumbench.api.routing import route_contexts
from quorumbench.settings import ServerSettings


def test_two_apps_share_each_module_level_routes_analysis_and_document_the_same(tmp_path):
    assert routing._build_dependant_with_parameterless_dependencies.__name__ == "shared"
    settings = ServerSettings(data_dir=tmp_path)
    first, second = create_app(settings), create_app(settings)
    one, two = _analysed(first), _analysed(second)
    assert one.keys() == two.keys() and len(one) > 90
    shared = [k for k in one if one[k] is two[k]]
    own = [k for k in one if one[k] is not two[k]]
    assert len(shared) > 80
    # the health routes are defined inside create_app: new functions, their own analysis
    assert {path for path, _ in own} == {"/v0/health", "/v0/health/live"}
    assert first.openapi() == second.openapi()


def _analysed(app):
    """Each route's analysis (its ``Dependant``) by path and methods; the app's own
    Starlette routes (``/openapi.json``, the docs) have none."""
    found = {}
    for route in route_contexts(app):
        dependant = getattr(route, "dependant", None)
        if dependant is not None:
            found[(route.path, tuple(sorted(route.methods or ())))] = dependant
    return found
