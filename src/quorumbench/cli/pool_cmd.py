"""``quorumbench pool create | list | show | join | cancel | reveal``: prize pools on a
server, over its API (``/v0/pools``).

Credits are integers in minor units, as the API has them: ``--funds 100000`` puts up
100,000 units, and every amount printed is in units. ``create``, ``join``, ``cancel``
and ``reveal`` need a credential (``QB_TOKEN``, else the ``quorumbench login``
session); ``list`` and ``show`` need none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.cli.model_cmd import JsonOption, ServerOption, emit_json, stdout_console
from quorumbench.errors import ConfigError, InvalidSpecError

pool_app = typer.Typer(
    help="Prize pools: create (funds into escrow), list, show the board and payouts, join "
    "with your model; cancel (admins); reveal a held-out final dataset (talks to the server).",
    no_args_is_help=True,
)
DEFAULT_SERVER = "http://127.0.0.1:8000"
_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
PHASES = ("upcoming", "open", "running", "ended", "settled", "cancelled")


def duration_s(text: str, option: str) -> int:
    """Seconds from ``90``, ``30m``, ``24h``, ``7d`` or ``2w``."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    match = _DURATION.match(value)
    if match is None:
        raise ConfigError(f"{option} {text!r} is not a duration (seconds, or 30m, 24h, 7d, 2w)")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def moment(text: str, option: str, now: datetime) -> str:
    """An ISO 8601 time with its offset (``2026-12-01T00:00:00Z``), or ``+DURATION`` from
    now (``+7d``), as the API takes it. A time without an offset is refused: whose
    midnight would it be?"""
    value = text.strip()
    if value.startswith("+"):
        return (now + timedelta(seconds=duration_s(value[1:], option))).isoformat()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{option} {text!r} is not a time: give ISO 8601 with an offset "
            "(2026-12-01T00:00:00Z) or +DURATION from now (+7d)"
        ) from None
    if parsed.tzinfo is None:
        raise ConfigError(
            f"{option} {text!r} has no time zone: add one (Z for UTC, or +02:00), or give "
            "+DURATION from now"
        )
    return parsed.isoformat()


def rule_params(pairs: list[str]) -> dict[str, int | float]:
    """``k=3`` and ``q=0.5`` as numbers (integers stay integers)."""
    params: dict[str, int | float] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            raise ConfigError(f"--param {pair!r} is not NAME=VALUE (k=3, q=0.5)")
        try:
            params[key] = int(raw)
        except ValueError:
            try:
                params[key] = float(raw)
            except ValueError:
                raise ConfigError(f"--param {pair!r}: {raw!r} is not a number") from None
    return params


def _time(stamp: str | None) -> str:
    if not stamp:
        return "-"
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def time_left(pool: dict[str, Any], now: datetime) -> str:
    """What the list shows: how long until the start, the deadline or the end."""
    phase = str(pool["phase"])
    if phase in ("ended", "settled", "cancelled"):
        return phase
    key, what = {
        "upcoming": ("starts_at", "starts in"),
        "open": ("join_deadline", "joins close in"),
        "running": ("ends_at", "ends in"),
    }[phase]
    left = datetime.fromisoformat(pool[key].replace("Z", "+00:00")) - now
    seconds = max(0, int(left.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    text = f"{days} d {rest // 3600} h" if days else f"{rest // 3600} h {rest % 3600 // 60} min"
    return f"{what} {text}"


def _params(pool: dict[str, Any]) -> str:
    given = ", ".join(f"{k}={v}" for k, v in sorted(pool["rule_params"].items()))
    return f"{pool['rule']}({given})" if given else pool["rule"]


def pools_table(found: list[dict[str, Any]], title: str, now: datetime) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for column in ("id", "title", "phase", "funds", "rule", "benchmarks", "entries", "time"):
        table.add_column(
            column, justify="right" if column in ("id", "funds", "entries") else "left"
        )
    for pool in found:
        table.add_row(
            str(pool["id"]),
            cell(pool["title"]),
            pool["phase"],
            f"{pool['funds']:,}",
            cell(_params(pool)),
            cell(", ".join(pool["benchmarks"])),
            str(pool["n_entries"]),
            time_left(pool, now),
        )
    if not found:
        table.caption = "no pools"
    return table


def pool_table(pool: dict[str, Any], server: str) -> Table:
    table = Table(title=Text(f"pool {pool['id']}: {pool['title']}"), title_justify="left")
    table.show_header = False
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    eligibility = [
        f"at most {pool['max_params']:,} parameters" if pool.get("max_params") else "",
        f"kinds {', '.join(pool['kinds'])}" if pool.get("kinds") else "",
        f"{pool['entries_per_account']} entr{'y' if pool['entries_per_account'] == 1 else 'ies'}"
        " per account",
    ]
    rows = [
        ("phase", pool["phase"] + (f": {pool['cancel_reason']}" if pool["cancel_reason"] else "")),
        ("funder", pool["funder"]),
        ("funds", f"{pool['funds']:,} units"),
        ("rule", f"{_params(pool)}, ties {pool['ties']}"),
        ("benchmarks", ", ".join(pool["benchmarks"])),
        ("starts", _time(pool["starts_at"])),
        ("joins close", _time(pool["join_deadline"])),
        ("ends", _time(pool["ends_at"])),
        ("board period", f"{pool['period_s'] / 3600:g} h"),
        ("eligibility", "; ".join(e for e in eligibility if e)),
        ("held-out final", pool["final_sha256"] or "none (the final standing is the board)"),
        ("page", f"{server}{pool['url']}"),
    ]
    if pool.get("final_url"):
        rows.append(("final data", pool["final_url"]))
    if pool.get("description"):
        rows.insert(0, ("description", pool["description"]))
    for field, value in rows:
        table.add_row(field, cell(value))
    return table


def board_table(detail: dict[str, Any]) -> Table:
    settled = detail["pool"]["phase"] == "settled"
    paid = {p["entry_id"]: p["amount"] for p in detail["payouts"]}
    table = Table(title="board (95% intervals)", title_justify="left")
    for column in (
        "#",
        "ranks",
        "model",
        "account",
        "score [95% CI]",
        "n",
        "paid" if settled else "would pay",
    ):
        table.add_column(column, justify="left" if column in ("model", "account") else "right")
    for row in detail["board"]:
        table.add_row(
            str(row["rank"]),
            f"{row['rank_best']}–{row['rank_worst']}",
            cell(row["entry"]["model"]),
            cell(row["entry"]["account"]),
            f"{row['score']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
            str(row["n_samples"]),
            f"{paid.get(row['entry']['id'], 0):,}",
        )
    if not detail["board"]:
        table.caption = "no scores yet" if detail["entries"] else "no entries yet"
    return table


def payouts_table(detail: dict[str, Any]) -> Table:
    settled = detail["pool"]["phase"] == "settled"
    names = {e["id"]: e["model"] for e in detail["entries"]}
    funds = detail["pool"]["funds"]
    title = "payouts" if settled else "payout preview (the rule applied to the board now)"
    table = Table(title=title, title_justify="left")
    for column in ("place", "model", "amount", "share"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for payout in detail["payouts"]:
        share = payout["amount"] / funds if funds else 0.0
        table.add_row(
            str(payout["place"]),
            cell(names.get(payout["entry_id"], f"entry {payout['entry_id']}")),
            f"{payout['amount']:,}",
            f"{share:.1%}",
        )
    if not detail["payouts"]:
        table.caption = "nothing to pay yet"
    return table


_HELD_OUT = {
    "awaiting_reveal": "held-out split: awaiting the funder's reveal (by {reveal_by})",
    "evaluating": "held-out split: {done} of {tasks} held-out tasks agreed, {final} final; "
    "the standing is taken when all are final or at {deadline}",
    "frozen": "held-out split: the final standing is the held-out one "
    "({done} of {tasks} tasks agreed)",
    "not_revealed": "held-out split: not revealed by {reveal_by}; the pool board decides",
    "cancelled": "held-out split: none (the pool was cancelled)",
}


def _held_out_line(final: dict[str, Any]) -> str:
    template = _HELD_OUT.get(str(final.get("state")))
    if template is None:
        return ""
    values = {k: _time(v) if k in ("reveal_by", "deadline") else v for k, v in final.items()}
    return template.format(**values)


def print_detail(detail: dict[str, Any], server: str) -> None:
    console = stdout_console()
    console.print(pool_table(detail["pool"], server))
    line = _held_out_line(detail.get("final") or {})
    if line:
        console.print(line)
    console.print(board_table(detail))
    console.print(payouts_table(detail))
    if detail["history"]:
        last = _time(detail["history"][-1].get("taken_at"))
        console.print(f"{len(detail['history'])} board snapshot(s), the last {last}")
    console.print(
        Text.assemble(("verify: ", "bold"), detail["verify"].replace("<this server>", server))
    )


IdArgument = Annotated[int, typer.Argument(min=1, help="The pool's id.")]


def create_command(
    title: Annotated[str, typer.Option("--title", help="The pool's title.")],
    funds: Annotated[
        int, typer.Option("--funds", min=1, help="Credits to put up, in minor units (integer).")
    ],
    ends: Annotated[
        str, typer.Option("--ends", help="End: ISO 8601 with an offset, or +DURATION (+28d).")
    ],
    benchmark: Annotated[
        list[str], typer.Option("--benchmark", "-b", help="A benchmark (repeatable).")
    ],
    rule: Annotated[
        str,
        typer.Option(
            "--rule",
            help="ArithmeticDecrease, Geometric, Proportional, WinnerTakesAll or TopKEqual.",
        ),
    ] = "ArithmeticDecrease",
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", metavar="NAME=VALUE", help="A rule parameter (k=3, q=0.3)."),
    ] = None,
    ties: Annotated[str, typer.Option("--ties", help="exact or statistical.")] = "exact",
    starts: Annotated[
        str | None, typer.Option("--starts", help="Start (default now): ISO 8601 or +DURATION.")
    ] = None,
    join_deadline: Annotated[
        str | None,
        typer.Option("--join-deadline", help="Joins close (default: the end): ISO or +DURATION."),
    ] = None,
    max_params: Annotated[
        int | None, typer.Option("--max-params", min=1, help="Eligibility: at most N parameters.")
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind", help="Eligibility: a model kind, hf, lora, gguf or openai (repeatable)."
        ),
    ] = None,
    entries_per_account: Annotated[
        int, typer.Option("--entries-per-account", min=1, help="Entries per account.")
    ] = 1,
    period: Annotated[
        str, typer.Option("--period", help="Board snapshot period (24h, 1d, or seconds).")
    ] = "24h",
    final_sha256: Annotated[
        str | None,
        typer.Option(
            "--final-sha256", help="SHA-256 of a held-out final dataset (reveal it at the end)."
        ),
    ] = None,
    description: Annotated[str, typer.Option("--description", help="Plain text.")] = "",
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Create a pool: the funds move from your balance into its escrow (needs a
    credential with model:register)."""
    from quorumbench.cli._http import Api

    now = datetime.now(UTC)
    body: dict[str, Any] = {
        "title": title,
        "description": description,
        "funds": funds,
        "rule": rule,
        "rule_params": rule_params(param or []),
        "ties": ties,
        "benchmarks": benchmark,
        "ends_at": moment(ends, "--ends", now),
        "entries_per_account": entries_per_account,
        "period_s": duration_s(period, "--period"),
        "kinds": kind or [],
    }
    if starts is not None:
        body["starts_at"] = moment(starts, "--starts", now)
    if join_deadline is not None:
        body["join_deadline"] = moment(join_deadline, "--join-deadline", now)
    if max_params is not None:
        body["max_params"] = max_params
    if final_sha256 is not None:
        body["final_sha256"] = final_sha256.strip().lower()
    with Api(server) as api:
        made = api.post("/v0/pools", body)
    if as_json:
        emit_json(made)
        return
    console = stdout_console()
    console.print(
        Text.assemble(
            ("created", "bold"),
            f": pool {made['id']}, {made['funds']:,} units in escrow — {api.server}{made['url']}",
        )
    )
    console.print(pool_table(made, api.server))


def list_command(
    phase: Annotated[
        str | None, typer.Option("--phase", help=f"Only pools in this phase: {', '.join(PHASES)}.")
    ] = None,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """List the server's pools: phase, funds, rule, entries and time left."""
    from quorumbench.cli._http import Api

    if phase is not None and phase not in PHASES:
        raise ConfigError(f"--phase {phase!r} is not one of {', '.join(PHASES)}")
    with Api(server) as api:
        found = api.public("/v0/pools", {"phase": phase} if phase else None)
    if as_json:
        emit_json(found)
        return
    title = f"pools on {api.server}" + (f" ({phase})" if phase else "")
    stdout_console().print(pools_table(found, title, datetime.now(UTC)))


def show_command(
    pool_id: IdArgument,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Show a pool: its terms, the board with intervals, the payout table for the current
    standing (or the payouts made), and how to verify them."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        detail = api.public(f"/v0/pools/{pool_id}")
    if as_json:
        emit_json(detail)
        return
    print_detail(detail, api.server)


def join_command(
    pool_id: IdArgument,
    model: Annotated[str, typer.Argument(help="Your model: its id, name or ref.")],
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Enter one of your models in a pool while joins are open (needs a credential with
    model:register)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        entry = api.post(f"/v0/pools/{pool_id}/entries", {"model": model})
    if as_json:
        emit_json(entry)
        return
    stdout_console().print(
        Text.assemble(
            ("joined", "bold"), f": {entry['model']} is entry {entry['id']} of pool {pool_id}"
        )
    )


def cancel_command(
    pool_id: IdArgument,
    reason: Annotated[str, typer.Option("--reason", help="Why (shown on the pool).")],
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Cancel a pool before settlement; its escrow goes back to the funder (admins)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        pool = api.post(f"/v0/pools/{pool_id}/cancel", {"reason": reason})
    if as_json:
        emit_json(pool)
        return
    stdout_console().print(
        Text.assemble(
            ("cancelled", "bold"),
            f": pool {pool['id']}; {pool['funds']:,} units refunded to {pool['funder']}",
        )
    )


def _reveal_body(path: Path, pool_id: int) -> dict[str, Any]:
    """The spec file as the server takes it (its name and version are the server's),
    checked here first."""
    import yaml

    from quorumbench.evaluation.spec import parse_spec

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InvalidSpecError(f"{path}: cannot read it as YAML or JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidSpecError(f"{path}: a benchmark spec is a mapping of keys to values")
    raw = {**raw, "name": f"pool-{pool_id}-final", "version": 1}
    spec = parse_spec(raw, str(path))
    if spec.data.url is None:
        raise InvalidSpecError(
            f"{path}: data.url: give the URL the held-out data is at (https://, or "
            "hf://datasets/<repo>@<commit>/<path>): the server and the runners fetch it"
        )
    return spec.model_dump(mode="json", exclude_none=True)


def reveal_command(
    pool_id: IdArgument,
    spec_file: Annotated[
        Path,
        typer.Argument(
            help="The held-out data as a benchmark spec (.yaml, .yml or .json) whose "
            "data.url is where it is and data.sha256 the pool's commitment."
        ),
    ],
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Reveal your pool's held-out final dataset (the funder, after the end and before
    the reveal deadline). The server fetches it and checks it hashes to the SHA-256
    published at creation; the runners then evaluate every entry on it, and the final
    standing is computed on it."""
    from quorumbench.cli._http import Api

    body = {"spec": _reveal_body(spec_file, pool_id)}
    with Api(server) as api:
        pool = api.post(f"/v0/pools/{pool_id}/reveal", body)
    if as_json:
        emit_json(pool)
        return
    stdout_console().print(
        Text.assemble(
            ("revealed", "bold"),
            f": pool {pool['id']}'s held-out data at {pool['final_url']}; the runners now "
            f"evaluate every entry on it (`quorumbench pool show {pool['id']}`)",
        )
    )


COMMANDS = {
    "create": create_command,
    "list": list_command,
    "show": show_command,
    "join": join_command,
    "cancel": cancel_command,
    "reveal": reveal_command,
}


def install(handle_errors: Callable[[Any], Any]) -> None:
    """Register the commands on :data:`pool_app`, each wrapped by the command line's
    error handler (one line on stderr, exit status 1)."""
    for name, command in COMMANDS.items():
        pool_app.command(name)(handle_errors(command))
