"""``quorumbench serve``, ``db``, ``account``, ``token`` and ``leaderboard``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from quorumbench.errors import ConfigError, QuorumError


def server_settings(
    database_url: str | None = None,
    data_dir: Path | None = None,
    queue: str | None = None,
    **extra: Any,
) -> Any:
    """ServerSettings from flags over environment over defaults."""
    from quorumbench.settings import QueueSettings, ServerSettings

    overrides: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if database_url:
        overrides["database_url"] = database_url
    if data_dir:
        overrides["data_dir"] = data_dir
    if queue:
        if queue == "sql":
            overrides["queue"] = QueueSettings(backend="sql")
        elif queue.startswith(("redis://", "rediss://", "unix://")):
            overrides["queue"] = QueueSettings(backend="redis", redis_url=queue)
        else:
            raise ConfigError(f"--queue {queue!r}: use sql or a redis://host:port/db URL")
    try:
        return ServerSettings(**overrides)
    except ValueError as exc:
        raise ConfigError(f"invalid server settings: {exc}") from exc


def serve(
    host: str,
    port: int,
    database_url: str | None,
    data_dir: Path | None,
    queue: str | None,
    datasets_dir: Path | None,
    console: Console,
) -> None:
    import uvicorn

    from quorumbench.api.app import create_app
    from quorumbench.settings import get_settings

    settings = server_settings(database_url, data_dir, queue)
    settings.check_listen_address(host)
    if settings.insecure_dev_login:
        console.print(
            "[bold red]INSECURE:[/] QB_INSECURE_DEV_LOGIN is on: POST /v0/auth/dev-login "
            "gives anyone a session as any account (development only)"
        )
    app = create_app(settings, datasets_dir=datasets_dir or get_settings().datasets_dir)
    console.print(
        f"QuorumBench server on http://{host}:{port} (API /v0, docs /docs); "
        f"database {settings.sqlalchemy_url.split('@')[-1]}, queue {settings.queue.backend}"
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="none")


def db_upgrade(database_url: str | None, data_dir: Path | None, console: Console) -> None:
    from quorumbench.db.engine import connect
    from quorumbench.db.migrate import upgrade

    settings = server_settings(database_url, data_dir)
    db = connect(settings.sqlalchemy_url)
    try:
        upgrade(db)
    finally:
        db.dispose()
    console.print("database schema is up to date")


def _context(database_url: str | None, data_dir: Path | None) -> Any:
    from quorumbench.services.wiring import build_context

    settings = server_settings(database_url, data_dir, benchmarks=[])
    return build_context(settings)


def account_create(
    name: str, admin: bool, database_url: str | None, data_dir: Path | None, console: Console
) -> None:
    from quorumbench.services.accounts import create_account

    ctx = _context(database_url, data_dir)
    try:
        account = create_account(ctx, name, is_admin=admin)
    finally:
        ctx.close()
    kind = "admin account" if admin else "account"
    console.print(f"created {kind} {account.name!r} (id {account.id})")


def token_issue(
    account: str,
    scopes: list[str] | None,
    name: str,
    expires_days: int | None,
    database_url: str | None,
    data_dir: Path | None,
    console: Console,
) -> None:
    from quorumbench.services.accounts import DEFAULT_SCOPES, issue_token

    ctx = _context(database_url, data_dir)
    try:
        issued = issue_token(
            ctx,
            account,
            scopes=tuple(scopes) if scopes else DEFAULT_SCOPES,
            name=name,
            expires_in=timedelta(days=expires_days) if expires_days else None,
        )
    finally:
        ctx.close()
    console.print(
        f"token for {account!r} (scopes: {issued.record.scopes}); shown once, store it now:"
    )
    print(issued.token)  # noqa: T201 - the one place a token is shown, plain for scripts


def leaderboard(server: str, benchmark: str | None, limit: int, console: Console) -> None:
    import httpx

    params: dict[str, Any] = {"limit": limit}
    if benchmark:
        params["benchmark"] = benchmark
    try:
        response = httpx.get(f"{server.rstrip('/')}/v0/leaderboard", params=params, timeout=30)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {server}: {type(exc).__name__}") from exc
    if response.status_code != 200:
        detail = response.json().get("detail", response.text) if response.content else ""
        raise QuorumError(f"{server} answered HTTP {response.status_code}: {detail}")
    print_leaderboard(console, response.json()["rows"], benchmark or "aggregate")


def print_leaderboard(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=f"leaderboard — {title}", title_justify="left")
    for column in ("#", "model", "score", "95% CI", "samples", "tasks"):
        table.add_column(column, justify="right" if column not in ("model",) else "left")
    for row in rows:
        table.add_row(
            str(row["rank"]),
            row["model"],
            f"{row['score']:.3f}",
            f"{row['ci_low']:.3f}–{row['ci_high']:.3f}",
            str(row["n_samples"]),
            str(row["n_tasks"]),
        )
    if not rows:
        table.caption = "no finalized tasks yet"
    console.print(table)
