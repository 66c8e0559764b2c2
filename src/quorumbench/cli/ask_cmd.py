"""``quorumbench ask "QUERY"``: a personalized board from a server (``POST /v0/asks``).

Prints the plan (YAML) with what each word of the query matched and what it could
not map, then the board: the public models' verified scores on the plan's slice and,
with ``--endpoint URL#MODEL``, your own endpoint evaluated live by the server (one
evaluation, not cross-checked), with a progress bar while it runs (``--wait``).

``--plan FILE`` sends a plan (JSON or YAML) instead of a query. The endpoint's key is
read from the environment variable ``--api-key-env`` names (never a flag: it would
stay in the shell history and the process list) and sent once, in the request body.
Endpoints need a signed-in account: ``QB_TOKEN``, else the ``quorumbench login``
session; an ask without endpoints needs none (a credential is sent when there is one).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from quorumbench.cli._console import escape
from quorumbench.errors import ConfigError, QuorumError

POLL_S = 0.5
"""How often ``--wait`` asks the server how far the ask is."""
DONE = ("SUCCESS", "FAILURE")


class AskFailedError(QuorumError):
    """The ask ended in FAILURE (the board was printed first)."""

    code = "ask-failed"


def read_plan(path: Path) -> dict[str, Any]:
    """A plan file, JSON or YAML (a JSON file is YAML too)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the plan {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"the plan {path} is not JSON or YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the plan {path} is not an object (a mapping of plan keys)")
    return data


def endpoint_bodies(endpoints: list[str], key_envs: list[str]) -> list[dict[str, Any]]:
    """``URL#MODEL`` options, with the keys the named variables hold (one variable for
    every endpoint, or one each, in order)."""
    if key_envs and len(key_envs) not in (1, len(endpoints)):
        raise ConfigError(
            f"{len(key_envs)} --api-key-env for {len(endpoints)} --endpoint: give one for "
            "all, or one per endpoint in the same order"
        )
    out = []
    for i, text in enumerate(endpoints):
        url, sep, model = text.rpartition("#")
        if not sep or not url or not model:
            raise ConfigError(f"--endpoint {text!r} is not URL#MODEL (https://host/v1#my-model)")
        body: dict[str, Any] = {"url": url, "model": model}
        if key_envs:
            name = key_envs[0] if len(key_envs) == 1 else key_envs[i]
            key = os.environ.get(name, "")
            if not key:
                raise ConfigError(f"--api-key-env {name}: the variable is not set or empty")
            body["api_key"] = key
        out.append(body)
    return out


def print_plan(console: Console, ask: dict[str, Any]) -> None:
    import yaml

    report = ask.get("report")
    if report:
        how = report["planner"] + (
            f" (fallback: {report['fallback']})" if report["fallback"] else ""
        )
        language = report.get("language") or "not sure"
        console.print(
            f"[bold]query[/] {escape(report['query'])}  (language: {language}; {escape(how)})"
        )
        for match in report["matches"]:
            console.print(
                f"  {escape(repr(match['text']))} → {match['key']}: {escape(match['value'])}"
                f"  ({match['how']}, {match['confidence']:.2f})"
            )
        unmapped = ", ".join(report["unmapped"])
        console.print(f"  unmapped: {escape(unmapped) if unmapped else 'nothing'}")
    console.print(f"[bold]plan[/] {ask['plan_id']}  (empty entries left out: any value)")
    console.print(
        escape(yaml.safe_dump(_compact(ask["plan"]), sort_keys=False, allow_unicode=True).rstrip())
    )


def _compact(value: Any) -> Any:
    """The plan without its empty lists, objects and nulls (they mean "any")."""
    if isinstance(value, dict):
        kept = {k: _compact(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ([], {}, None)}
    return value


def _freshness(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return ""
    age = now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    hours = age.total_seconds() / 3600
    if hours < 1:
        return f"{max(0, int(age.total_seconds() // 60))} min ago"
    return f"{hours:.0f} h ago" if hours < 48 else f"{hours / 24:.0f} d ago"


def _interval(row: dict[str, Any]) -> str:
    if row.get("score") is None:
        return ""
    return f"{row['score']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _benchmarks(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def print_board(console: Console, board: dict[str, Any]) -> None:
    now = datetime.now(UTC)
    table = Table(title=f"board — plan {board['plan_id'][:12]}", title_justify="left")
    for column in ("#", "model", "score [95% CI]", "n", "benchmarks", "freshness"):
        table.add_column(column, justify="left" if column in ("model", "benchmarks") else "right")
    for row in board["rows"]:
        thin = " (thin)" if row.get("thin") else ""
        table.add_row(
            str(row["rank"]),
            escape(row["model"]),
            _interval(row),
            f"{row['n_samples']}{thin}",
            escape(_benchmarks(row["benchmarks"])),
            _freshness(row["updated_at"], now),
        )
    for end in board.get("endpoints", []):
        state = "" if end["status"] == "SUCCESS" else f" — {end['status']}"
        if end.get("error"):
            state += f": {end['error']}"
        table.add_row(
            "—",
            escape(f"{end['model']} ({end['url']}) — not cross-checked{state}"),
            _interval(end),
            str(end["n_samples"]),
            escape(_benchmarks(end["benchmarks"])),
            "live",
        )
    if not board["rows"] and not board.get("endpoints"):
        console.print("no verified results match this plan yet")
    else:
        console.print(table)


def _wait(
    get: Callable[[str], Any], ask: dict[str, Any], console: Console, timeout_s: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    columns = (
        TextColumn("live evaluation"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("ask", total=ask["progress_total"] or None)
        while ask["status"] not in DONE:
            if time.monotonic() > deadline:
                raise QuorumError(
                    f"the ask {ask['id']} did not end in {timeout_s:.0f} s (it goes on: "
                    f"GET /v0/asks/{ask['id']})"
                )
            time.sleep(POLL_S)
            ask = get(f"/v0/asks/{ask['id']}")
            bar.update(task, total=ask["progress_total"] or None, completed=ask["progress_done"])
    return ask


def ask(
    server: str,
    query: str | None,
    plan_file: Path | None,
    endpoints: list[str],
    key_envs: list[str],
    *,
    deepen: bool,
    wait: bool,
    json_output: bool,
    timeout_s: float,
    console: Console,
) -> None:
    from quorumbench.cli._http import TOKEN_ENV, Api

    if query is None and plan_file is None:
        raise ConfigError('give a QUERY ("best small model for math") or --plan FILE')
    if key_envs and not endpoints:
        raise ConfigError("--api-key-env names the key of an --endpoint: give the endpoint")
    body: dict[str, Any] = {"endpoints": endpoint_bodies(endpoints, key_envs), "deepen": deepen}
    if query is not None:
        body["query"] = query
    if plan_file is not None:
        body["plan"] = read_plan(plan_file)
    signed = bool(endpoints or deepen or os.environ.get(TOKEN_ENV, "").strip())
    with Api(server) as api:
        made = api.post("/v0/asks", body) if signed else api.public_post("/v0/asks", body)
        get = api.get if signed else api.public
        if not json_output:
            print_plan(console, made)
        if wait and made["status"] not in DONE:
            made = _wait(get, made, console, timeout_s)
        else:
            made = get(f"/v0/asks/{made['id']}")
        board = get(f"/v0/asks/{made['id']}/board")
    if json_output:
        console.print_json(json.dumps({"ask": made, "board": board}))
    else:
        print_board(console, board)
        if made["status"] not in DONE:
            console.print(
                f"live evaluation under way ({made['progress_done']}/{made['progress_total']}): "
                f"{api.server}/v0/asks/{made['id']}/board"
            )
    if made["status"] == "FAILURE":
        raise AskFailedError(f"the ask {made['id']} failed: {made['error']}")


ServerOption = Annotated[
    str,
    typer.Option("--server", help="Server URL (the one `quorumbench login --server` was given)."),
]


def ask_command(
    query: Annotated[
        str | None,
        typer.Argument(
            help="The question, in plain words (any language).",
            show_default=False,
            metavar="QUERY",
        ),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            dir_okay=False,
            metavar="FILE",
            help="Send this plan (JSON or YAML) as it is.",
        ),
    ] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            metavar="URL#MODEL",
            help="Your OpenAI-compatible endpoint, URL#MODEL (repeatable; needs a login).",
        ),
    ] = None,
    api_key_env: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key-env",
            metavar="VAR",
            help="The environment variable holding the endpoint's API key (one for all, "
            "or one per --endpoint).",
        ),
    ] = None,
    deepen: Annotated[
        bool,
        typer.Option("--deepen", help="Also schedule verified tasks for thin public slices."),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the live evaluation, with a progress bar.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the ask and its board as JSON, and nothing else.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds --wait waits at most.")
    ] = 3600.0,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Ask a server for a board built for your question (and your own endpoint)."""
    from quorumbench.cli.app import console

    ask(
        server,
        query,
        plan,
        endpoint or [],
        api_key_env or [],
        deepen=deepen,
        wait=wait,
        json_output=json_output,
        timeout_s=timeout,
        console=console,
    )
