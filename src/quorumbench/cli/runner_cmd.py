"""``quorumbench runner``: run a volunteer runner against a server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler

runner_app = typer.Typer(
    help="Evaluate tasks from a QuorumBench server (a volunteer runner).", no_args_is_help=True
)


@runner_app.command("start")
def start_command(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="QB_RUNNER_SERVER_URL",
            help="Server URL (default http://127.0.0.1:8000).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="QB_RUNNER_TOKEN",
            help="API token with task:pull and task:submit (prefer the environment variable; "
            "never printed).",
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            envvar="QB_RUNNER_NAME",
            help="Runner name within the account (default: the host name).",
            show_default=False,
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Do one task (or find none), then exit.")
    ] = False,
    auto: Annotated[
        bool, typer.Option("--auto", help="Keep working until Ctrl-C (the default).")
    ] = False,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            "--datasets-dir",
            envvar="QB_RUNNER_DATASETS_DIR",
            help="Local benchmark data laid out like shared/datasets (else the Hub).",
            file_okay=False,
            show_default=False,
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            envvar="QB_RUNNER_CACHE_DIR",
            help="Cache for converted models (default ~/.cache/quorumbench).",
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            envvar="QB_RUNNER_DEVICE",
            help="auto, cpu, cuda or cuda:N (default auto).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            envvar="QB_RUNNER_BATCH_SIZE",
            min=1,
            help="Rows per batch (default 8).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Pull tasks from the server, evaluate them and submit the results."""
    from quorumbench.cli.app import err_console, handle_errors  # app.py imports this module

    if once and auto:
        raise typer.BadParameter("use --once or --auto, not both", param_hint="--once")
    given: dict[str, Any] = {
        "server_url": server,
        "token": token,
        "name": name,
        "datasets_dir": datasets_dir,
        "cache_dir": cache_dir,
        "device": device,
        "batch_size": batch_size,
    }
    overrides = {key: value for key, value in given.items() if value is not None}
    code = handle_errors(_start)(overrides, once, err_console)
    raise typer.Exit(code)


def _start(overrides: dict[str, Any], once: bool, console: Console) -> int:
    from pydantic import ValidationError

    from quorumbench.errors import ConfigError
    from quorumbench.runner.loop import build_runner, stop_on_signals
    from quorumbench.settings import RunnerSettings

    try:
        settings = RunnerSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid runner settings: {problems}") from None
    stop = threading.Event()
    try:
        with (
            _logging_to(console),
            build_runner(settings, console=console) as runner,
            stop_on_signals(stop),
        ):
            console.print(
                f"runner {settings.name!r} → {settings.server_url} "
                f"({'one task' if once else 'until Ctrl-C'})",
                highlight=False,
            )
            if once:
                outcome = runner.run_once(stop)
                if outcome.status == "no-work":
                    console.print("no task available; nothing to do", highlight=False)
                return 130 if outcome.status == "stopped" else 0 if outcome.ok else 1
            submitted = runner.run_forever(stop)
    except KeyboardInterrupt:  # a second Ctrl-C: the lease was released on the way out
        console.print("interrupted", highlight=False)
        return 130
    console.print(f"stopped after {submitted} submitted result(s)", highlight=False)
    return 0


@contextmanager
def _logging_to(console: Console) -> Iterator[None]:
    """Show the runner's log lines (one per task, warnings) on ``console`` meanwhile."""
    logger = logging.getLogger("quorumbench.runner")
    handler = RichHandler(console=console, show_path=False, markup=False)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
