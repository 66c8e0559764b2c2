"""Build a ServerContext from settings: database (migrated), queue, benchmarks."""

from __future__ import annotations

from pathlib import Path

from quorumbench.db.engine import Database, connect
from quorumbench.db.migrate import upgrade
from quorumbench.queue.base import TaskQueue
from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services.benchmarks import ensure_benchmarks
from quorumbench.services.context import ServerContext, utc_now
from quorumbench.services.publiclog import ensure_log
from quorumbench.settings import ServerSettings


def build_queue(settings: ServerSettings, db: Database) -> TaskQueue:
    sql = SqlTaskQueue(db, settings.lease_seconds)
    if settings.queue.backend == "sql":
        return sql
    from quorumbench.queue.redis_streams import RedisStreamTaskQueue

    assert settings.queue.redis_url is not None
    return RedisStreamTaskQueue(sql, settings.queue.redis_url, settings.queue.stream)


def build_context(
    settings: ServerSettings, *, datasets_dir: Path | None = None, migrate: bool = True
) -> ServerContext:
    """Connect, migrate to the latest schema, register the configured benchmarks."""
    db = connect(settings.sqlalchemy_url)
    if migrate:
        upgrade(db)
    ctx = ServerContext(settings, db, build_queue(settings, db), utc_now, datasets_dir)
    ensure_benchmarks(ctx, settings.benchmarks)
    if migrate:
        ensure_log(ctx)
    return ctx
