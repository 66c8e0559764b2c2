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

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from quorumbench import __version__
from quorumbench.api import params, problems
from quorumbench.api.access import AccessLog
from quorumbench.api.deps import install_hot_path
from quorumbench.api.openapi import QuorumBenchAPI
from quorumbench.api.routes import (
    account,
    asks,
    auth,
    benchmarks,
    board,
    edge,
    efficiency,
    leases,
    ledger,
    models,
    oauth,
    pools,
    runners,
    submissions,
)
from quorumbench.api.routes import log as public_log
from quorumbench.errors import QuorumError
from quorumbench.logs import FIELDS, event
from quorumbench.services.context import ServerContext
from quorumbench.services.health import health as service_health
from quorumbench.services.live import stop_pool
from quorumbench.services.scheduler import tick
from quorumbench.services.wiring import build_context, check_serving
from quorumbench.settings import ServerSettings
from quorumbench.web import pages

log = logging.getLogger("quorumbench.scheduler")


class SchedulerThread(threading.Thread):
    """Runs ``tick`` periodically until stopped.

    A tick that fails is logged once, in one line, while it keeps failing the same way
    (a Redis or database that is down would otherwise fill the log every few seconds);
    the first tick that works again says so.
    """

    def __init__(self, ctx: ServerContext, interval: float) -> None:
        super().__init__(name="quorumbench-scheduler", daemon=True)
        self.ctx = ctx
        self.interval = interval
        self.stopped = threading.Event()
        self.failing: str | None = None

    def run(self) -> None:
        while not self.stopped.is_set():
            self.tick_once()
            self.stopped.wait(self.interval)

    def tick_once(self) -> None:
        try:
            report = tick(self.ctx)
        except QuorumError as exc:  # a dependency is down: what to do is in the message
            self._failed(exc.message, None)
        except Exception as exc:  # the loop must survive a failed tick (a bug): traceback
            self._failed(f"{type(exc).__name__}: {exc}", exc)
        else:
            if self.failing is not None:
                event(log, "scheduler.recovered", after=self.failing)
                self.failing = None
            busy = report.created or report.expired or report.published or report.pools
            event(
                log,
                "scheduler.tick",
                level=logging.INFO if busy else logging.DEBUG,
                epoch=report.epoch,
                created=report.created,
                expired=report.expired,
                published=report.published,
                pools=report.pools,
            )

    def _failed(self, why: str, exc: Exception | None) -> None:
        if why == self.failing:
            event(log, "scheduler.failed", level=logging.DEBUG, error=why)
            return
        self.failing = why
        if exc is None:
            event(log, "scheduler.failed", level=logging.WARNING, error=why)
        else:
            log.error("scheduler.failed", exc_info=exc, extra={FIELDS: {"error": why}})

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
        if context is None:
            ctx = build_context(settings, datasets_dir=datasets_dir)
        else:
            ctx = check_serving(context)  # a context built by the caller (tests, serve)
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
            stop_pool(ctx)  # live asks: waiting ones fail, running ones stop
            if context is None:
                ctx.close()
            event(logging.getLogger("quorumbench.server"), "server.stop")

    app = QuorumBenchAPI(
        title="QuorumBench",
        version=__version__,
        description="Cross-checked evaluations of open LLMs. JSON API under /v0.",
        lifespan=lifespan,
    )
    problems.install(app)
    params.install(app)
    app.add_middleware(problems.BodyLimit, limit=settings.max_body_bytes)
    routers = (
        auth,
        oauth,
        models,
        submissions,
        leases,
        board,
        efficiency,
        edge,
        benchmarks,
        public_log,
        runners,
        account,
        asks,
        pools,
        ledger,
    )
    for router in (module.router for module in routers):
        app.include_router(router)
    if settings.insecure_dev_login:
        app.include_router(auth.dev_router)
    for page_router in pages.ROUTERS:
        app.include_router(page_router)

    @app.get("/v0/health/live", tags=["meta"])
    def live() -> dict[str, str]:
        """Liveness: this process answers. Asks no dependency (``/v0/health`` does)."""
        return {"status": "ok", "version": __version__}

    @app.get(
        "/v0/health",
        tags=["meta"],
        responses={
            503: {
                "description": "A dependency (database, queue) is down.",
                "content": {"application/json": {}},
            }
        },
    )
    def health(request: Request) -> JSONResponse:
        """``ok`` when the database and the task queue answer; else 503 ``unhealthy``,
        with what is wrong (and what to start) per dependency."""
        report = service_health(request.app.state.context)
        code = 200 if report["status"] == "ok" else 503
        return JSONResponse({**report, "version": __version__}, status_code=code)

    if settings.access_log:
        app.add_middleware(AccessLog)

    return app
