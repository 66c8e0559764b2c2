"""Every router of the site, for ``create_app`` to mount and the error handlers to
tell a page for people from the JSON API.

``routes`` serves the leaderboard and the public pages, ``signin`` signing in and
out, ``account`` the signed-in account's page and its forms, ``submit`` the
submission form and retiring a model, ``ask`` asking in plain language (``/ask``,
``/asks/{id}``), ``pools`` the prize pools (``/pools``, ``/pools/{id}``, the create
and join forms), ``efficiency`` the measured efficiency per hardware class
(``/efficiency``).
and join forms), ``runner_page`` one runner's page (``/runners/{id}``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from quorumbench.web import account, ask, efficiency, pools, routes, runner_page, signin, submit

ROUTERS: tuple[APIRouter, ...] = (
    routes.router,
    signin.router,
    account.router,
    submit.router,
    ask.router,
    pools.router,
    efficiency.router,
    runner_page.router,
)


@cache
def page_endpoints() -> frozenset[Any]:
    """The endpoint of every page route of the site."""
    return frozenset(
        getattr(route, "endpoint", None) for router in ROUTERS for route in router.routes
    )
