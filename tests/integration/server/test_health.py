"""Health, a Redis queue that is down, Redis without AOF, and the scheduler's log lines."""

from __future__ import annotations

import logging

import pytest
import redis
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from quorumbench.api.app import SchedulerThread, create_app
from quorumbench.cli.app import app as cli
from quorumbench.services import scheduler

from ..operator.harness import free_port
from ..queue.conftest import REDIS_URL


@pytest.fixture
def dead_redis() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def _health(ctx):
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        return client.get("/v0/health")


def test_health_checks_the_database_and_the_queue(ctx):
    answer = _health(ctx)
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "ok" and body["version"]
    assert body["checks"]["database"] == {"status": "ok", "detail": ctx.settings.sqlalchemy_url}
    assert body["checks"]["queue"]["detail"] == "sql (in the database)"


def test_a_redis_queue_that_is_down_makes_the_server_unhealthy(make_ctx, dead_redis):
    ctx = make_ctx(queue={"backend": "redis", "redis_url": dead_redis, "stream": "qb:health"})
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        live = client.get("/v0/health/live")
    assert live.status_code == 200 and live.json()["status"] == "ok"  # the process is up
    answer = _health(ctx)
    assert answer.status_code == 503
    queue = answer.json()["checks"]["queue"]
    assert queue["status"] == "unavailable"
    assert f"cannot reach Redis at {dead_redis}" in queue["detail"]
    assert "start Redis there or fix QB_QUEUE__REDIS_URL" in queue["detail"]
    assert answer.json()["checks"]["database"]["status"] == "ok"


def test_a_failing_tick_is_logged_once_in_one_line_until_it_recovers(
    make_ctx, dead_redis, caplog, monkeypatch
):
    ctx = make_ctx(queue={"backend": "redis", "redis_url": dead_redis, "stream": "qb:ticks"})
    thread = SchedulerThread(ctx, 60)
    caplog.set_level(logging.DEBUG, logger="quorumbench")
    for _ in range(4):
        thread.tick_once()
    failed = [r for r in caplog.records if r.getMessage() == "scheduler.failed"]
    assert [r.levelno for r in failed] == [logging.WARNING] + [logging.DEBUG] * 3
    assert "cannot reach Redis" in failed[0].qb_fields["error"]
    assert failed[0].exc_info is None  # a known outage: one line, no traceback
    monkeypatch.setattr("quorumbench.api.app.tick", lambda ctx: scheduler.TickReport(1, 0, 0, 0))
    thread.tick_once()
    assert [r.getMessage() for r in caplog.records][-2:] == [
        "scheduler.recovered",
        "scheduler.tick",
    ]


def test_an_unexpected_tick_error_is_logged_with_its_traceback(ctx, caplog, monkeypatch):
    def broken(ctx):
        raise RuntimeError("a bug")

    monkeypatch.setattr("quorumbench.api.app.tick", broken)
    thread = SchedulerThread(ctx, 60)
    thread.tick_once()
    thread.tick_once()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None


@pytest.mark.redis
def test_redis_without_aof_is_a_warning(make_ctx, monkeypatch):
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        from ..pg import unavailable

        unavailable(f"Redis is unreachable at {REDIS_URL}: {exc}")
    ctx = make_ctx(queue={"backend": "redis", "redis_url": REDIS_URL, "stream": "qb:aof"})
    monkeypatch.setattr(ctx.queue.redis, "config_get", lambda key: {"appendonly": "no"})
    (warning,) = ctx.queue.check()
    assert "without AOF persistence (appendonly no)" in warning
    monkeypatch.setattr(ctx.queue.redis, "config_get", lambda key: {"appendonly": "yes"})
    assert ctx.queue.check() == []

    def refused(key):
        raise redis.ResponseError("unknown command 'CONFIG'")  # managed Redis

    monkeypatch.setattr(ctx.queue.redis, "config_get", refused)
    assert ctx.queue.check() == []


def test_serve_starts_with_a_redis_that_is_down_and_says_what_to_start(
    tmp_path, dead_redis, monkeypatch
):
    ran = []
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets=None: ran.append(sockets))
    port = free_port()
    result = CliRunner().invoke(
        cli,
        ["serve", "--port", str(port), "--data-dir", str(tmp_path), "--queue", dead_redis],
        env={"QB_BENCHMARKS": '["arith"]'},  # the default list reads GSM8K from the Hub
    )
    assert result.exit_code == 0, result.output
    assert ran, "the server started"
    out = " ".join(result.output.split())
    assert f"warning: cannot reach Redis at {dead_redis}" in out
    assert "start Redis there" in out and "/v0/health reports it" in out


def test_the_access_log_has_one_line_per_request_without_the_query(make_ctx, caplog):
    ctx = make_ctx(access_log=True)
    caplog.set_level(logging.INFO, logger="quorumbench")
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        client.get("/v0/leaderboard", params={"benchmark": "arith", "q": "secret-ish"})
        client.get("/v0/models/999")
    lines = [r.qb_fields for r in caplog.records if r.getMessage() == "http.request"]
    assert [(f["method"], f["path"], f["status"]) for f in lines] == [
        ("GET", "/v0/leaderboard", 200),
        ("GET", "/v0/models/999", 404),
    ]
    assert all("secret-ish" not in str(f) for f in lines)
    refused = [r.qb_fields for r in caplog.records if r.getMessage() == "request.refused"]
    assert refused[0]["status"] == 404 and refused[0]["path"] == "/v0/models/999"


def test_no_access_log_unless_asked(ctx, caplog):
    caplog.set_level(logging.INFO, logger="quorumbench")
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        client.get("/v0/leaderboard")
    assert not [r for r in caplog.records if r.getMessage() == "http.request"]
