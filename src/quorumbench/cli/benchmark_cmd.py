"""``quorumbench benchmark create | show | retire``: benchmarks on a server, over its API.

``create`` reads a spec file (.yaml, .yml or .json), checks it here as the server will
(``evaluation/spec.py``) and sends it (``POST /v0/benchmarks``, scope
``benchmark:create``). Its data must be at a URL the server can fetch: a spec whose
data is a local ``path`` is refused here, with what to do instead.
``quorumbench account grant`` and ``revoke`` (admins) change who may create.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.cli.model_cmd import JsonOption, ServerOption, emit_json, stdout_console
from quorumbench.errors import LocalDataPathError


def _spec_body(path: Path) -> dict[str, Any]:
    from quorumbench.benchmarks.custom import read_spec

    spec = read_spec(path)
    if spec.data.url is None:
        raise LocalDataPathError(
            f"{path}: data.path {spec.data.path!r} is a file on this machine, which the "
            "server cannot read: publish the file at an https:// URL (or as a Hub dataset "
            "file, hf://datasets/<repo>@<commit>/<path>) and give that as data.url with the "
            "same sha256"
        )
    return spec.model_dump(mode="json", exclude_none=True)


def benchmark_table(bench: dict[str, Any]) -> Table:
    table = Table(title=f"benchmark {bench['name']}", title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    rows = [
        ("version", f"v{bench['version']} (prompt v{bench['prompt_version']})"),
        ("pillar", bench.get("pillar") or "-"),
        ("kind", bench["kind"]),
        ("origin", bench["origin"] + (f", by {bench['owner']}" if bench.get("owner") else "")),
        ("data", bench.get("source_url") or "the server's own"),
        ("sha256", bench["dataset_sha256"]),
        ("samples per task", str(bench["samples_per_task"])),
        ("first epoch", str(bench.get("first_epoch") or "-")),
        (
            "state",
            "active"
            if bench["active"]
            else f"inactive, retired {bench['retired_at']}"
            if bench.get("retired_at")
            else "inactive",
        ),
    ]
    for field, value in rows:
        table.add_row(field, cell(str(value)))
    return table


def benchmark_create_command(
    spec: Annotated[
        Path, typer.Argument(help="Custom benchmark spec (.yaml, .yml or .json) with data.url.")
    ],
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Create a benchmark on the server from a spec whose data is at a URL (needs the
    benchmark:create scope and permission; talks to the server)."""
    from quorumbench.cli._http import Api

    body = _spec_body(spec)
    with Api(server) as api:
        made = api.post("/v0/benchmarks", body)
    if as_json:
        emit_json(made)
        return
    console = stdout_console()
    console.print(
        Text.assemble(
            ("created", "bold"),
            f": {made['name']} v{made['version']}, scheduled from epoch {made['first_epoch']}",
        )
    )
    console.print(benchmark_table(made))


def benchmark_show_command(
    name: Annotated[str, typer.Argument(help="The benchmark's name.")],
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Show a benchmark of the server: version, pillar, data URL and hash (talks to the
    server)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        bench = api.public(f"/v0/benchmarks/{name}")
    if as_json:
        emit_json(bench)
        return
    stdout_console().print(benchmark_table(bench))


def benchmark_retire_command(
    name: Annotated[str, typer.Argument(help="The benchmark's name.")],
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Retire one of your benchmarks: off the schedule and the board, its history kept
    (talks to the server)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        bench = api.post(f"/v0/benchmarks/{name}/retire")
    if as_json:
        emit_json(bench)
        return
    stdout_console().print(
        Text.assemble(("retired", "bold"), f": {bench['name']} at {bench['retired_at']}")
    )


def _change(account: str, action: str, reason: str | None, as_json: bool, server: str) -> None:
    from quorumbench.cli._http import Api

    with Api(server) as api:
        status = api.post(
            f"/v0/accounts/{account}/grants",
            {"permission": "benchmark:create", "action": action, "reason": reason},
        )
    if as_json:
        emit_json(status)
        return
    held = "holds" if status["held"] else "does not hold"
    stdout_console().print(f"{account} {held} benchmark:create ({status['reason']})")


ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why (recorded and shown).")]


def account_grant_command(
    account: Annotated[str, typer.Argument(help="The account's name.")],
    reason: ReasonOption = None,
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Grant an account benchmark:create (admins; talks to the server)."""
    _change(account, "grant", reason, as_json, server)


def account_revoke_command(
    account: Annotated[str, typer.Argument(help="The account's name.")],
    reason: ReasonOption = None,
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Revoke an account's benchmark:create (admins; talks to the server)."""
    _change(account, "revoke", reason, as_json, server)
