"""``quorumbench credits mint`` (admin) and ``credits show``: the credits ledger on a
server, over its HTTP API (``QB_TOKEN``, else the ``quorumbench login`` session)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.cli.model_cmd import JsonOption, ServerOption, emit_json, stdout_console

credits_app = typer.Typer(
    help="Credits (integer minor units): your balance and statement; minting (admin).",
    no_args_is_help=True,
)


@credits_app.command("mint")
def mint_command(
    account: Annotated[str, typer.Argument(help="The account's name.")],
    amount: Annotated[int, typer.Argument(help="Whole minor units, above zero.", min=1)],
    memo: Annotated[str, typer.Option("--memo", help="Why (e.g. the payment it settles).")] = "",
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Mint credits to an account (admin; talks to the server)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        line = api.post("/v0/ledger/mint", {"account": account, "amount": amount, "memo": memo})
    if as_json:
        emit_json(line)
        return
    stdout_console().print(
        Text(
            f"minted {line['amount']} to {account} ({line['holder']}): balance "
            f"{line['balance_after']}, transfer {line['txn_id']}"
        )
    )


@credits_app.command("show")
def show_command(
    limit: Annotated[int, typer.Option("--limit", help="Lines to show.", min=1, max=200)] = 20,
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Your balance and latest ledger lines, newest first (talks to the server)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        mine = api.get(f"/v0/ledger/me?limit={limit}")
    if as_json:
        emit_json(mine)
        return
    console = stdout_console()
    console.print(Text(f"balance {mine['balance']} (minor units), {mine['holder']}"))
    table = Table(title="statement", title_justify="left")
    for column in ("id", "when", "amount", "balance", "reason", "pool", "memo"):
        table.add_column(column, overflow="fold")
    for line in mine["entries"]:
        table.add_row(
            str(line["id"]),
            str(line["created_at"])[:16].replace("T", " "),
            f"{line['amount']:+d}",
            str(line["balance_after"]),
            line["reason"],
            "—" if line["pool_id"] is None else str(line["pool_id"]),
            cell(line["memo"]),
        )
    if not mine["entries"]:
        table.caption = "no lines yet"
    console.print(table)
