"""Typed dependencies: the server context, the authenticated principal, hot-path threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.leases import runs_inline
from quorumbench.services.ratelimit import count_submission, count_write
from quorumbench.services.sessions import authenticate

T = TypeVar("T")


async def get_context(request: Request) -> ServerContext:
    # async: an attribute read needs no trip through the worker threads
    ctx: ServerContext = request.app.state.context
    return ctx


Context = Annotated[ServerContext, Depends(get_context)]


bearer = HTTPBearer(
    scheme_name="bearer",
    description="An API token (``qb_...``) or an access JWT (``POST /v0/auth/token``).",
    auto_error=False,
)
"""Declares the credential in the OpenAPI document; the token is read and checked here."""


async def get_bearer_token(
    request: Request,
    declared: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str | None:
    """The bearer token of the request, if any (checked later, by ``authenticate``).

    ``declared`` is what :data:`bearer` read; the header is parsed here as it always was.
    """
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


BearerToken = Annotated[str | None, Depends(get_bearer_token)]


def get_principal(ctx: Context, token: BearerToken) -> Principal:
    return authenticate(ctx, token)


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def get_writer(ctx: Context, principal: CurrentPrincipal) -> Principal:
    """The principal of a write request, counted against its account's rate limit."""
    count_write(ctx, principal)
    return principal


Writer = Annotated[Principal, Depends(get_writer)]


def get_submitter(ctx: Context, principal: Writer) -> Principal:
    """The principal of a validation or registration (``model:register``): a write,
    also counted against the account's submission limit (each one reads the Hub)."""
    principal.require("model:register")
    count_submission(ctx, principal)
    return principal


Submitter = Annotated[Principal, Depends(get_submitter)]


def hot_path_limiter(ctx: ServerContext) -> CapacityLimiter | None:
    """How the runner endpoints (pull, submit, heartbeat, release) run their work.

    On the event loop itself (None) where the services say so
    (:func:`~quorumbench.services.leases.runs_inline`: SQLite with the SQL queue).
    Otherwise a few threads of their own overlap the network waits; more than a few
    would only contend for the interpreter lock.
    """
    if runs_inline(ctx):
        return None
    return CapacityLimiter(ctx.settings.hot_path_threads)


def install_hot_path(app: FastAPI, ctx: ServerContext) -> None:
    """Decide how :func:`offload` runs hot-path work for ``app``."""
    app.state.hot_path = hot_path_limiter(ctx)


async def offload(request: Request, work: Callable[[], T]) -> T:
    """Run a runner endpoint's blocking work (auth included) as one unit.

    In one trip to a small pool of threads of their own, or inline on SQLite (see
    :func:`hot_path_limiter`): with many runners at once, the 40 threads that serve
    everything else would spend more CPU taking turns on the interpreter and
    database locks than working.
    """
    limiter: CapacityLimiter | None = request.app.state.hot_path
    if limiter is None:
        return work()
    return await anyio.to_thread.run_sync(work, limiter=limiter)
