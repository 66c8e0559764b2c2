"""``quorumbench runner``: run a volunteer runner against a server.

Everything printed here that comes from the user or the server (names, paths, URLs,
messages) is printed with ``markup=False``: a ``[bold]`` in a path stays as it is.
"""

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


ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="QB_RUNNER_SERVER_URL",
        help="The server's root URL, http:// or https:// (default http://127.0.0.1:8000).",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="QB_RUNNER_TOKEN",
        help="API token with task:pull and task:submit (prefer the environment variable; "
        "never printed).",
        show_default=False,
        show_envvar=True,
    ),
]
NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        envvar="QB_RUNNER_NAME",
        help="Runner name within the account (default: the host name).",
        show_default=False,
    ),
]
KeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--key-file",
        envvar="QB_RUNNER_KEY_FILE",
        dir_okay=False,
        help="Signing key file (default $XDG_CONFIG_HOME/quorumbench/runner-keys/<server>/"
        "<account>/<name>.key).",
        show_default=False,
    ),
]


@runner_app.command("init")
def init_command(
    server: ServerOption = None,
    token: TokenOption = None,
    name: NameOption = None,
    key_file: KeyFileOption = None,
    rotate: Annotated[
        bool,
        typer.Option("--rotate", help="Make a new key even if one exists (the old is revoked)."),
    ] = False,
) -> None:
    """Make this runner's Ed25519 signing key (mode 0600) and register it with the server."""
    from quorumbench.cli.app import console, handle_errors  # app.py imports this module

    given = {"server_url": server, "token": token, "name": name, "key_file": key_file}
    overrides = {key: value for key, value in given.items() if value is not None}
    handle_errors(_init)(overrides, rotate, console)


def _init(overrides: dict[str, Any], rotate: bool, console: Console) -> None:
    from quorumbench.errors import ConfigError
    from quorumbench.runner.client import ServerClient
    from quorumbench.runner.keys import load_key, new_key, save_key
    from quorumbench.runner.preflight import default_key, identify, registered_keys

    settings = _settings(overrides)
    if settings.token is None:
        raise ConfigError("no API token: pass --token or set QB_RUNNER_TOKEN")
    with ServerClient(settings.server_url, settings.token, settings.name) as client:
        # The token first: a wrong one, or one that cannot register keys, leaves no file.
        identity = identify(client, settings, needs=("task:submit",))
        if settings.key_file is not None:
            path = settings.key_file
            key = load_key(path) if path.exists() else None
        else:
            path, key, _ = default_key(settings, identity, registered_keys(client))
        made = rotate or key is None
        if made:
            key = new_key(path)  # written only once it is registered
        assert key is not None
        registered = client.register_key(key)
        if made:
            save_key(key)
    done = "made a new key" if made else "kept the existing key"
    console.print(
        f"runner {settings.name!r} of account {identity.account!r}: {done} at {path}; "
        f"registered with {settings.server_url} as {registered['key_id']}",
        highlight=False,
        markup=False,
    )
    if not identity.grants("task:pull"):
        console.print(
            "note: this token lacks task:pull; `runner start` needs a token with "
            "task:pull and task:submit",
            highlight=False,
            markup=False,
        )


def _settings(overrides: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from quorumbench.errors import ConfigError
    from quorumbench.settings import RunnerSettings

    try:
        return RunnerSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid runner settings: {problems}") from None


@runner_app.command("start")
def start_command(
    ctx: typer.Context,
    server: ServerOption = None,
    token: TokenOption = None,
    name: NameOption = None,
    key_file: KeyFileOption = None,
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
            envvar=["QB_RUNNER_DATASETS_DIR", "QB_DATASETS_DIR"],
            help="Local benchmark data laid out like shared/datasets (else the Hub); "
            "QB_RUNNER_DATASETS_DIR, else QB_DATASETS_DIR.",
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
    sandbox: Annotated[
        str | None,
        typer.Option(
            "--sandbox",
            envvar="QB_RUNNER_SANDBOX",
            help="Where model code runs: auto (bubblewrap, else unshare), bwrap or unshare "
            "(default auto).",
            show_default=False,
        ),
    ] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Run model code in the runner's own process, with your network and files "
            "(only for models you trust).",
        ),
    ] = False,
    memory_limit_mb: Annotated[
        int | None,
        typer.Option(
            "--memory-limit-mb",
            envvar="QB_RUNNER_MEMORY_LIMIT_MB",
            min=512,
            help="Address space of a sandboxed worker in MiB (default: 3/4 of the memory).",
            show_default=False,
        ),
    ] = None,
    process_limit: Annotated[
        int | None,
        typer.Option(
            "--process-limit",
            envvar="QB_RUNNER_PROCESS_LIMIT",
            min=16,
            help="Processes and threads a sandboxed worker may have (default 512).",
            show_default=False,
        ),
    ] = None,
    task_time_limit: Annotated[
        float | None,
        typer.Option(
            "--task-time-limit",
            envvar="QB_RUNNER_TASK_TIME_LIMIT_S",
            min=1,
            help="Seconds one task may take before its sandbox is killed (default 3600).",
            show_default=False,
        ),
    ] = None,
    allow_pickle: Annotated[
        bool,
        typer.Option(
            "--allow-pickle",
            envvar="QB_RUNNER_ALLOW_PICKLE",
            help="Load pickled .bin/.pt weights (they can run code).",
        ),
    ] = False,
    trust_remote_code: Annotated[
        bool,
        typer.Option(
            "--trust-remote-code",
            envvar="QB_RUNNER_TRUST_REMOTE_CODE",
            help="Run Python code shipped in a model repository.",
        ),
    ] = False,
    allow_private_endpoints: Annotated[
        bool,
        typer.Option(
            "--allow-private-endpoints",
            envvar="QB_RUNNER_ALLOW_PRIVATE_ENDPOINTS",
            help="Evaluate openai: endpoints on loopback or private addresses (your own "
            "network: only for a server you run).",
        ),
    ] = False,
    allow_private_data_urls: Annotated[
        bool,
        typer.Option(
            "--allow-private-data-urls",
            envvar="QB_RUNNER_ALLOW_PRIVATE_DATA_URLS",
            help="Fetch benchmark data from loopback or private addresses, or plain http "
            "(only for a server you run).",
        ),
    ] = False,
) -> None:
    """Pull tasks from the server, evaluate them and submit the results."""
    from quorumbench.cli.app import err_console, handle_errors  # app.py imports this module

    if once and auto:
        raise typer.BadParameter("use --once or --auto, not both", param_hint="--once")
    source = ctx.get_parameter_source("sandbox")
    typed = source is not None and source.name == "COMMANDLINE"  # not the variable
    if no_sandbox and typed:
        raise typer.BadParameter("use --sandbox or --no-sandbox, not both", param_hint="--sandbox")
    if typed and sandbox not in ("auto", "bwrap", "unshare"):
        raise typer.BadParameter(
            f"{sandbox!r}: use auto, bwrap or unshare (or --no-sandbox)", param_hint="--sandbox"
        )
    given: dict[str, Any] = {
        "server_url": server,
        "token": token,
        "name": name,
        "key_file": key_file,
        "datasets_dir": datasets_dir,
        "cache_dir": cache_dir,
        "device": device,
        "batch_size": batch_size,
        "sandbox": "none" if no_sandbox else sandbox,
        "memory_limit_mb": memory_limit_mb,
        "process_limit": process_limit,
        "task_time_limit_s": task_time_limit,
        "allow_pickle": allow_pickle or None,
        "trust_remote_code": trust_remote_code or None,
        "allow_private_endpoints": allow_private_endpoints or None,
        "allow_private_data_urls": allow_private_data_urls or None,
    }
    overrides = {key: value for key, value in given.items() if value is not None}
    code = handle_errors(_start)(overrides, once, err_console)
    raise typer.Exit(code)


def _start(overrides: dict[str, Any], once: bool, console: Console) -> int:
    from quorumbench.runner.loop import build_runner, fatal_error, stop_on_signals

    settings = _settings(overrides)
    stop = threading.Event()
    try:
        with (
            _logging_to(console),
            build_runner(settings, console=console) as runner,
            stop_on_signals(stop, runner.busy.is_set),
        ):
            account = runner.identity.account if runner.identity else "?"
            console.print(
                f"runner {settings.name!r} of account {account!r} → {settings.server_url} "
                f"({'one task' if once else 'until Ctrl-C'})",
                highlight=False,
                markup=False,
            )
            if once:
                outcome = runner.run_once(stop)
                if outcome.ends_runner:
                    raise fatal_error(outcome)
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
