"""What a running server depends on, checked (``GET /v0/health``), and where its state
lives (the startup lines of ``quorumbench serve`` and its ``server.start`` log event)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from quorumbench.db.engine import check_connection, describe_url
from quorumbench.db.models import Benchmark
from quorumbench.errors import QuorumError
from quorumbench.services import publiclog, sessions
from quorumbench.services.context import ServerContext


@dataclass(frozen=True)
class Check:
    """One dependency: ``ok`` or not, and what to do about it."""

    name: str
    ok: bool
    detail: str


def checks(ctx: ServerContext) -> list[Check]:
    """The database (one round trip) and the task queue (Redis: PING)."""
    found = []
    try:
        check_connection(ctx.db)
        found.append(Check("database", True, describe_url(ctx.db.url)))
    except QuorumError as exc:
        found.append(Check("database", False, exc.message))
    try:
        warnings = ctx.queue.check()
        found.append(Check("queue", True, "; ".join([ctx.queue.describe(), *warnings])))
    except QuorumError as exc:
        found.append(Check("queue", False, exc.message))
    return found


def health(ctx: ServerContext) -> dict[str, Any]:
    """``GET /v0/health``: ``ok`` only when every dependency answers."""
    found = checks(ctx)
    return {
        "status": "ok" if all(c.ok for c in found) else "unhealthy",
        "checks": {
            c.name: {"status": "ok" if c.ok else "unavailable", "detail": c.detail} for c in found
        },
    }


def state_locations(ctx: ServerContext) -> list[tuple[str, str]]:
    """Where every piece of this server's state lives, and the settings that matter."""
    settings = ctx.settings
    signer = publiclog.signer_for(ctx)
    with ctx.db.read() as session:
        active = session.execute(
            select(Benchmark.name, Benchmark.version)
            .where(Benchmark.active)
            .order_by(Benchmark.name)
        ).all()
    database = describe_url(ctx.db.url)
    if ctx.created:
        database += " (new: made on this start)"
    return [
        ("database", database),
        ("queue", ctx.queue.describe()),
        ("data dir", str(settings.data_dir)),
        ("log key", f"{publiclog.key_location(settings)} (key id {signer.key_id})"),
        ("auth key", str(sessions.key_path(settings))),
        ("rate limits", f"{settings.write_rate_limit or 'off'} in {settings.rate_limit_storage}"),
        ("datasets", str(ctx.datasets_dir) if ctx.datasets_dir else "the Hub (pinned revisions)"),
        ("benchmarks", ", ".join(f"{name} v{version}" for name, version in active) or "none"),
        (
            "protocol",
            f"quorum {settings.quorum}, {settings.samples_per_task} samples per task, "
            f"epochs of {settings.epoch_seconds} s, leases of {settings.lease_seconds} s",
        ),
    ]
