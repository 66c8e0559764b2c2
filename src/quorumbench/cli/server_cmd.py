"""``quorumbench serve``, ``db``, ``account``, ``token`` and ``leaderboard``."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quorumbench.core.taxonomy import PILLARS
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
    *,
    log_level: str | None = None,
    log_format: str | None = None,
    access_log: bool | None = None,
) -> None:
    """Bind the port, build the server (database, benchmarks, log key: any problem is one
    line before anything is served), say where its state lives, then serve."""
    from quorumbench import logs
    from quorumbench.settings import get_settings

    settings = server_settings(
        database_url,
        data_dir,
        queue,
        log_level=log_level,
        log_format=log_format,
        access_log=access_log,
    )
    settings.check_listen_address(host)
    with logs.configured(settings.log_level, settings.log_format):
        _serve(settings, host, port, datasets_dir or get_settings().datasets_dir, console)


def _serve(
    settings: Any, host: str, port: int, datasets_dir: Path | None, console: Console
) -> None:
    import uvicorn

    from quorumbench.api.app import create_app
    from quorumbench.services.wiring import build_context

    if settings.insecure_dev_login:
        console.print(
            "[bold red]INSECURE:[/] QB_INSECURE_DEV_LOGIN is on: POST /v0/auth/dev-login "
            "gives anyone a session as any account (development only)"
        )
    sock = bind(host, port)
    try:
        ctx = build_context(settings, datasets_dir=datasets_dir)
        try:
            _announce(ctx, host, sock.getsockname()[1], console)
            app = create_app(settings, context=ctx)
            config = uvicorn.Config(
                app, log_config=None, access_log=False, ws="none", lifespan="on"
            )
            with suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it stopped on
                uvicorn.Server(config).run(sockets=[sock])
        finally:
            ctx.close()
    finally:
        sock.close()


_log = logging.getLogger("quorumbench.server")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or one line saying why there is none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use (another server?): stop it or pass --port"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _announce(ctx: Any, host: str, port: int, console: Console) -> None:
    """The startup lines: where every piece of state lives; the queue's health."""
    from quorumbench import __version__, logs
    from quorumbench.services.health import state_locations

    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    facts = state_locations(ctx)
    console.print(
        f"QuorumBench {__version__} server on {escape(url)} (API /v0, docs /docs)",
        highlight=False,
    )
    for label, value in facts:
        console.print(f"  {label:<12} {escape(value)}", highlight=False)
    fields: dict[str, Any] = {label.replace(" ", "_"): value for label, value in facts}
    logs.event(
        _log,
        "server.start",
        version=__version__,
        url=url,
        log_level=ctx.settings.log_level,
        **fields,
    )
    try:
        warnings = ctx.queue.check()
    except QuorumError as exc:
        warnings = [f"{exc.message} (the server starts; /v0/health reports it until it answers)"]
    for warning in warnings:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
        logs.event(_log, "server.warning", level=logging.WARNING, detail=warning)


def db_upgrade(
    database_url: str | None, data_dir: Path | None, create: bool, console: Console
) -> None:
    from quorumbench.db.migrate import current_revision, head_revision
    from quorumbench.services.wiring import check_schema, open_database

    settings = server_settings(database_url, data_dir)
    db = open_database(settings, create=create)
    try:
        before = current_revision(db)
        check_schema(db, create=create, migrate=True)
        where = _describe(db.url)
    finally:
        db.dispose()
    head = head_revision()
    if before == head:
        console.print(f"database {escape(where)} is at schema {head} (up to date)", highlight=False)
    else:
        console.print(
            f"database {escape(where)}: schema {before or 'none'} -> {head}", highlight=False
        )


def _describe(url: str) -> str:
    """A database URL as it may be printed (no password)."""
    from quorumbench.db.engine import describe_url

    return describe_url(url)


@contextmanager
def admin(database_url: str | None, data_dir: Path | None, create: bool = False) -> Iterator[Any]:
    """The context of an admin command: the server's settings, its existing database
    (made only with ``create``); it changes nothing the server schedules."""
    from quorumbench.services.wiring import admin_context

    ctx = admin_context(server_settings(database_url, data_dir), create=create)
    try:
        yield ctx
    finally:
        ctx.close()


def account_create(
    name: str,
    is_admin: bool,
    database_url: str | None,
    data_dir: Path | None,
    create: bool,
    console: Console,
) -> None:
    from quorumbench.services.accounts import create_account

    with admin(database_url, data_dir, create) as ctx:
        account = create_account(ctx, name, is_admin=is_admin)
        where = _describe(ctx.db.url)
    kind = "admin account" if is_admin else "account"
    console.print(
        f"created {kind} {escape(repr(account.name))} (id {account.id}) in {escape(where)}",
        highlight=False,
    )


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

    with admin(database_url, data_dir) as ctx:
        issued = issue_token(
            ctx,
            account,
            scopes=tuple(scopes) if scopes else DEFAULT_SCOPES,
            name=name,
            expires_in=timedelta(days=expires_days) if expires_days else None,
        )
        where = _describe(ctx.db.url)
    console.print(
        f"token for {escape(repr(account))} (scopes: {escape(issued.record.scopes)}) in "
        f"{escape(where)}; shown once, store it now:",
        highlight=False,
    )
    print(issued.token)  # noqa: T201 - the one place a token is shown, plain for scripts


def log_rotate_key(
    new_key_file: Path, database_url: str | None, data_dir: Path | None, console: Console
) -> None:
    from quorumbench.services.publiclog import load_signer, rotate_key

    made = not new_key_file.exists()
    new = load_signer(new_key_file, create=True)
    with admin(database_url, data_dir) as ctx:
        try:
            rotation = rotate_key(ctx, new)
        except BaseException:
            if made:
                new_key_file.unlink(missing_ok=True)
            raise
        where = _describe(ctx.db.url)
    from quorumbench import logs

    logs.event(
        _log,
        "log.key_rotated",
        size=rotation.size,
        old_key_id=rotation.old_key_id,
        new_key_id=rotation.new_key_id,
    )
    console.print(
        f"log key of {escape(where)} rotated after tree size {rotation.size}: "
        f"{rotation.old_key_id} -> {rotation.new_key_id} ({'made' if made else 'read'} "
        f"{escape(str(new_key_file))}). Point every server replica at the new key "
        f"(QB_LOG_KEY_FILE={escape(str(new_key_file))}, or QB_LOG_KEY) and restart them: "
        "a replica still holding the old key refuses to start and to sign.",
        highlight=False,
    )


def leaderboard(server: str, benchmark: str | None, limit: int, console: Console) -> None:
    import httpx

    params: dict[str, Any] = {"limit": limit}
    if benchmark:
        params["benchmark"] = benchmark
    else:  # the unranked models too, with the pillars they miss
        params["unranked"] = "true"
    try:
        response = httpx.get(f"{server.rstrip('/')}/v0/leaderboard", params=params, timeout=30)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {server}: {type(exc).__name__}") from exc
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", "")
        except ValueError:
            detail = response.text[:200]
        raise QuorumError(f"{server} answered HTTP {response.status_code}: {detail}")
    print_leaderboard(console, response.json()["rows"], benchmark or "aggregate")


def print_leaderboard(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    """The API's rows as a table: the rank and the range of ranks the 95% intervals
    allow (``rank_best``–``rank_worst``); aggregate rows add each pillar's
    chance-corrected score, and an unranked one says which pillars it misses."""
    table = Table(title=f"leaderboard — {escape(title)}", title_justify="left")
    pillars = [p for p in PILLARS if any(p in (row.get("pillars") or {}) for row in rows)]
    columns = ("#", "range", "model", "score", "95% CI", *pillars, "samples", "tasks")
    for column in columns:
        table.add_column(column, justify="right" if column not in ("model",) else "left")
    for row in rows:
        ranked = row["rank"] is not None
        missing = ", ".join(row.get("missing_pillars") or [])
        scores = row.get("pillars") or {}
        table.add_row(
            str(row["rank"]) if ranked else "—",
            f"{row.get('rank_best', '?')}–{row.get('rank_worst', '?')}"  # (an older server)
            if ranked
            else "",
            escape(row["model"]) + ("" if ranked else escape(f" (not ranked; missing {missing})")),
            f"{row['score']:.3f}",
            f"{row['ci_low']:.3f}–{row['ci_high']:.3f}",
            *(f"{scores[p]['score']:.3f}" if p in scores else "—" for p in pillars),
            str(row["n_samples"]),
            str(row["n_tasks"]),
        )
    if not rows:
        table.caption = "no finalized tasks yet"
    console.print(table)
