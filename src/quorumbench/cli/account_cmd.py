"""``quorumbench account show``, ``token list`` and ``token revoke``: your own account on
a server, over its HTTP API (``QB_TOKEN``, else the ``quorumbench login`` session).

The ``account`` and ``token`` groups also hold operator commands that write the
server's database directly (``account create``, ``token issue``); these talk to the
server, as anyone may.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.cli.model_cmd import (
    JsonOption,
    ServerOption,
    emit_json,
    owned_table,
    parse_answer,
    stdout_console,
)


def _when(value: Any) -> str:
    return "—" if not value else str(value)[:16].replace("T", " ")


def tokens_table(tokens: list[dict[str, Any]]) -> Table:
    table = Table(title="API tokens", title_justify="left")
    columns = ("id", "name", "prefix", "scopes", "created", "expires", "last used", "revoked")
    for column in columns:
        table.add_column(column, overflow="fold")
    for token in tokens:
        table.add_row(
            str(token["id"]),
            cell(token["name"]),
            cell(token["prefix"] + "…"),
            cell(" ".join(token["scopes"])),
            _when(token["created_at"]),
            _when(token["expires_at"]),
            _when(token["last_used_at"]),
            _when(token["revoked_at"]),
        )
    if not tokens:
        table.caption = "no API tokens"
    return table


def runners_table(runners: list[dict[str, Any]]) -> Table:
    table = Table(title="your runners", title_justify="left")
    for column in ("id", "name", "last seen", "results", "agreement", "keys", "suspended"):
        table.add_column(column, overflow="fold")
    for runner in runners:
        rate = runner["agreement_rate"]
        live = [k for k in runner.get("keys", []) if not k.get("revoked_at")]
        table.add_row(
            str(runner["id"]),
            cell(runner["name"]),
            _when(runner["last_seen_at"]),
            str(runner["results"]),
            "—" if rate is None else f"{rate:.0%} ({runner['outliers']} outliers)",
            f"{len(live)} active of {len(runner.get('keys', []))}",
            "yes" if runner["suspended"] else "no",
        )
    if not runners:
        table.caption = "no runners yet: `quorumbench runner init`"
    return table


def account_show_command(
    as_json: JsonOption = False, server: ServerOption = "http://127.0.0.1:8000"
) -> None:
    """Show your account on the server: quota, models with their status, runners (talks
    to the server)."""
    from quorumbench.cli._http import Api
    from quorumbench.cli._report import quota_table
    from quorumbench.services.quota import QuotaStatus

    with Api(server) as api:
        account = api.get("/v0/me/account")
    if as_json:
        emit_json(account)
        return
    console = stdout_console()
    admin = " (admin)" if account["is_admin"] else ""
    console.print(
        Text.assemble(
            ("account ", "bold"),
            f"{account['name']}{admin}, id {account['account_id']}, on {api.server}; this "
            f"credential's scopes: {' '.join(account['scopes']) or 'none'}",
        )
    )
    console.print(quota_table(parse_answer(api.server, QuotaStatus, account["quota"])))
    for row in account["models"]:
        row["url"] = f"{api.server}{row['url']}"
    console.print(owned_table(account["models"]))
    console.print(runners_table(account["runners"]))
    grant = account.get("benchmark_create") or {}
    if grant.get("action"):
        who = f"by the admin {grant['by']}" if grant.get("by") else "automatically"
        verb = "granted" if grant["action"] == "grant" else "revoked"
        console.print(
            Text(f"benchmark:create: {verb} {_when(grant['changed_at'])} {who}: {grant['reason']}")
        )
    elif grant:
        console.print(
            Text(
                f"benchmark:create: not held ({grant['agreeing_evaluations']} accepted "
                f"evaluations agreeing with consensus of the {grant['needed']} that grant it)"
            )
        )
    live = [t for t in account["tokens"] if not t["revoked_at"]]
    console.print(
        Text(f"{len(live)} API token(s) in use: `quorumbench token list` shows them"),
    )


def token_list_command(
    as_json: JsonOption = False, server: ServerOption = "http://127.0.0.1:8000"
) -> None:
    """List your account's API tokens, revoked ones included, never a secret (talks to the
    server)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        tokens = api.get("/v0/tokens")
    if as_json:
        emit_json(tokens)
    else:
        stdout_console().print(tokens_table(tokens))


def token_revoke_command(
    token_id: Annotated[int, typer.Argument(metavar="ID", min=1, help="The token's id.")],
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Revoke one of your account's API tokens and the sessions opened with it (talks to
    the server; `token list` shows the ids)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        api.delete(f"/v0/tokens/{token_id}")
    stdout_console().print(Text(f"revoked API token {token_id}: the server refuses it from now on"))
