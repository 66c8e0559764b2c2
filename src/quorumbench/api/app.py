"""The FastAPI application, built by ``create_app(settings)``.

A background thread runs the scheduler tick (epochs, task creation, lease expiry)
every ``scheduler_interval_s``; several replicas may run it at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from quorumbench import __version__
from quorumbench.api import params, problems
from quorumbench.api.deps import install_hot_path
from quorumbench.api.routes import auth, board, leases, models, oauth, runners
from quorumbench.api.routes import log as public_log
from quorumbench.services.context import ServerContext
from quorumbench.services.scheduler import tick
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings
from quorumbench.web import routes as web

log = logging.getLogger("quorumbench.scheduler")


class SchedulerThread(threading.Thread):
    """Runs ``tick`` periodically until stopped."""

    def __init__(self, ctx: ServerContext, interval: float) -> None:
        super().__init__(name="quorumbench-scheduler", daemon=True)
        self.ctx = ctx
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                tick(self.ctx)
            except Exception:  # the loop must survive a failed tick; it is logged
                log.exception("scheduler tick failed")
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)


def create_app(
    settings: ServerSettings,
    *,
    context: ServerContext | None = None,
    datasets_dir: Path | None = None,
    run_scheduler: bool = True,
) -> FastAPI:
    """The app for ``settings`` (or an already built context, in tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx = context or build_context(settings, datasets_dir=datasets_dir)
        app.state.context = ctx
        install_hot_path(app, ctx)
        if settings.insecure_dev_login:
            logging.getLogger("quorumbench.api").warning(
                "INSECURE: QB_INSECURE_DEV_LOGIN is on: POST /v0/auth/dev-login gives anyone "
                "a session as any account; never run it like this where others can connect"
            )
        scheduler = SchedulerThread(ctx, settings.scheduler_interval_s) if run_scheduler else None
        if scheduler:
            scheduler.start()
        try:
            yield
        finally:
            if scheduler:
                scheduler.stop()
            if context is None:
                ctx.close()

    app = FastAPI(
        title="QuorumBench",
        version=__version__,
        description="Cross-checked evaluations of open LLMs. JSON API under /v0.",
        lifespan=lifespan,
    )
    problems.install(app)
    params.install(app)
    app.add_middleware(problems.BodyLimit, limit=settings.max_body_bytes)
    routers = (auth, oauth, models, leases, board, public_log, runners)
    for router in (module.router for module in routers):
        app.include_router(router)
    if settings.insecure_dev_login:
        app.include_router(auth.dev_router)
    app.include_router(web.router)

    @app.get("/v0/health", tags=["meta"])
    def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    return app
