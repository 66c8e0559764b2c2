"""Typed dependencies: the server context and the authenticated principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from quorumbench.services.accounts import Principal, authenticate
from quorumbench.services.context import ServerContext


async def get_context(request: Request) -> ServerContext:
    # async: an attribute read needs no trip through the worker threads
    ctx: ServerContext = request.app.state.context
    return ctx


Context = Annotated[ServerContext, Depends(get_context)]


def get_principal(request: Request, ctx: Context) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return authenticate(ctx, token.strip() if scheme.lower() == "bearer" else None)


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
