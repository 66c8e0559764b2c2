"""``quorumbench`` (alias ``qb``): the command line.

Errors the package raises on purpose (:class:`~quorumbench.errors.QuorumError`) are
printed as one line on stderr with exit status 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.markup import escape

from quorumbench.cli._console import error_line, make_console
from quorumbench.cli._hints import error_message
from quorumbench.cli._options import DatasetsDir
from quorumbench.cli.account_cmd import (
    account_show_command,
    token_list_command,
    token_revoke_command,
)
from quorumbench.cli.ask_cmd import ask_command
from quorumbench.cli.benchmark_cmd import (
    account_grant_command,
    account_revoke_command,
    benchmark_create_command,
    benchmark_retire_command,
    benchmark_show_command,
)
from quorumbench.cli.credits_cmd import credits_app
from quorumbench.cli.demo_cmd import demo_command
from quorumbench.cli.edge_cmd import edge_command
from quorumbench.cli.export_cmd import export_site_command
from quorumbench.cli.model_cmd import (
    model_list_command,
    model_register_command,
    model_retire_command,
)
from quorumbench.cli.pool_cmd import install as install_pool_commands
from quorumbench.cli.pool_cmd import pool_app
from quorumbench.cli.runner_cmd import runner_app
from quorumbench.cli.submission_cmd import submission_app
from quorumbench.errors import QuorumError

app = typer.Typer(
    name="quorumbench",
    help="QuorumBench: cross-checked evaluations of open LLMs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)
benchmark_app = typer.Typer(
    help="List, validate and sample benchmarks; create, show and retire them on a server.",
    no_args_is_help=True,
)
plugins_app = typer.Typer(
    help="Inspect installed benchmark and backend plugins.", no_args_is_help=True
)
db_app = typer.Typer(help="Database schema migrations.", no_args_is_help=True)
account_app = typer.Typer(
    help="Accounts: `show` talks to the server; `create` is for admins, on the server machine.",
    no_args_is_help=True,
)
token_app = typer.Typer(
    help="Scoped API tokens: `list` and `revoke` talk to the server; `issue` is for admins, "
    "on the server machine.",
    no_args_is_help=True,
)
model_app = typer.Typer(
    help="Register, list and retire models on a server (over its API).", no_args_is_help=True
)
log_app = typer.Typer(
    help="The public log's signing key (admin, on the server machine).", no_args_is_help=True
)
app.add_typer(benchmark_app, name="benchmark")
app.add_typer(plugins_app, name="plugins")
app.add_typer(runner_app, name="runner")
app.add_typer(model_app, name="model")
app.add_typer(db_app, name="db")
app.add_typer(account_app, name="account")
app.add_typer(token_app, name="token")
app.add_typer(log_app, name="log")
app.add_typer(submission_app, name="submission")
app.add_typer(pool_app, name="pool")
app.add_typer(credits_app, name="credits")

console = make_console()
err_console = make_console(stderr=True)
_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Turn a QuorumError into one line on stderr and exit status 1.

    An error whose hint names a setting this command has a flag for gets the flag
    appended (``cli/_hints.py``).
    """

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except QuorumError as exc:
            if _state["debug"]:
                raise
            line = error_line(error_message(exc, func))
            err_console.print(line, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _state["debug"] = debug


@app.command("eval")
@handle_errors
def eval_command(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="Model ref: hf:, gguf:, openai:, bundled:, mock: or a backend plugin's scheme "
            "(see docs/models.md).",
        ),
    ] = "bundled:smollm2-135m-instruct",
    benchmark: Annotated[
        str,
        typer.Option(
            "--benchmark", "-b", help="Benchmark name, or a custom spec file (.yaml/.json)."
        ),
    ] = "arith",
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="Samples to draw.")] = 10,
    seed: Annotated[str, typer.Option("--seed", help="Sampling seed (any string).")] = "0",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Rows per batch.")] = 8,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the full result (documented format) here.")
    ] = None,
    datasets_dir: DatasetsDir = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir", help="Cache for converted models (else QB_CACHE_DIR, else ~/.cache)."
        ),
    ] = None,
    prompt_style: Annotated[
        str,
        typer.Option(
            "--prompt-style", help="auto (chat template if the model has one), chat or plain."
        ),
    ] = "auto",
    shots: Annotated[
        int | None, typer.Option("--shots", min=0, help="Few-shot exemplars (benchmark default).")
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option("--max-new-tokens", min=1, help="Generation limit (benchmark default)."),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    dtype: Annotated[
        str, typer.Option("--dtype", help="auto, float32, bfloat16 or float16.")
    ] = "auto",
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Allow pickled .bin weights (can run code).")
    ] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run model code shipped in the repo.")
    ] = False,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Key for openai: endpoints (prefer QB_OPENAI_API_KEY; never printed or stored).",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Parallel requests to openai: endpoints.")
    ] = 4,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads.")] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="What runs a GGUF file (gguf:, bundled:) or a LoRA adapter on one (hf:): "
            "transformers (de-quantized), llamacpp (the file as it is, as runners do for "
            "GGUF models registered since protocol 1.3 and adapters on them since 1.4; in "
            "the gguf extra), or auto: llamacpp where it is installed, else transformers.",
        ),
    ] = "auto",
    show_samples: Annotated[
        bool, typer.Option("--show-samples", help="Also print each sample's result.")
    ] = False,
    sandbox: Annotated[
        str | None,
        typer.Option(
            "--sandbox",
            help="Where code benchmarks (humaneval, mbpp) run the model's programs: auto "
            "(bubblewrap, else unshare), bwrap or unshare (default auto).",
            show_default=False,
        ),
    ] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Run code benchmarks' generated programs without a sandbox, with your "
            "network and files (only for models you trust).",
        ),
    ] = False,
) -> None:
    """Evaluate a model on a benchmark and print the score (the main job)."""
    from quorumbench.cli._eval import EvalArgs, run_eval, sandbox_choice

    if prompt_style not in ("auto", "chat", "plain"):
        raise typer.BadParameter("use auto, chat or plain", param_hint="--prompt-style")
    style: Literal["auto", "chat", "plain"] = prompt_style  # type: ignore[assignment]
    if engine not in ("transformers", "llamacpp", "auto"):
        raise typer.BadParameter("use transformers, llamacpp or auto", param_hint="--engine")
    run_eval(
        EvalArgs(
            model=model,
            benchmark=benchmark,
            samples=samples,
            seed=seed,
            batch_size=batch_size,
            json_path=json_path,
            datasets_dir=datasets_dir,
            cache_dir=cache_dir,
            prompt_style=style,
            shots=shots,
            max_new_tokens=max_new_tokens,
            device=device,
            dtype=dtype,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            api_key=api_key,
            concurrency=concurrency,
            threads=threads,
            show_samples=show_samples,
            sandbox=sandbox_choice(sandbox, no_sandbox),
            engine=engine,  # type: ignore[arg-type]
        ),
        console,
        err_console,
    )


@benchmark_app.command("list")
@handle_errors
def benchmark_list() -> None:
    """List the built-in and plugin benchmarks."""
    from quorumbench.cli._benchmarks import list_benchmarks

    list_benchmarks(console)


@benchmark_app.command("validate")
@handle_errors
def benchmark_validate(
    spec: Annotated[Path, typer.Argument(help="Custom benchmark spec (.yaml, .yml or .json).")],
) -> None:
    """Check a custom benchmark spec and its data file; exit 1 with the reason if invalid."""
    from quorumbench.cli._benchmarks import validate_spec

    validate_spec(spec, console)


@benchmark_app.command("sample")
@handle_errors
def benchmark_sample(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name or spec file.")],
    seed: Annotated[str, typer.Option("--seed", help="Sampling seed.")] = "0",
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="Samples to draw.")] = 10,
    datasets_dir: DatasetsDir = None,
) -> None:
    """Print the sample ids a (benchmark, seed, n) task uses, one per line."""
    from quorumbench.cli._benchmarks import print_sample_ids

    print_sample_ids(benchmark, seed, samples, datasets_dir)


@plugins_app.command("list")
@handle_errors
def plugins_list() -> None:
    """List registered benchmarks and backends, with load errors if any."""
    from quorumbench.cli._benchmarks import list_plugins

    list_plugins(console)


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL (else QB_DATABASE_URL, else SQLite in the data directory).",
    ),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Directory of the server's state: the default SQLite database and keys "
        "(else QB_DATA_DIR, else $XDG_DATA_HOME/quorumbench).",
    ),
]
Create = Annotated[
    bool,
    typer.Option(
        "--create", help="Make the database (and its schema) if there is none; else refuse."
    ),
]


@app.command("serve")
@handle_errors
def serve_command(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="sql (default) or a redis://host:port/db URL (Streams)."),
    ] = None,
    datasets_dir: DatasetsDir = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help="debug, info, warning or error (else QB_LOG_LEVEL, else info).",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="kv (key=value lines) or json (else QB_LOG_FORMAT, else kv).",
            show_default=False,
        ),
    ] = None,
    access_log: Annotated[
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="Also log every HTTP request (else QB_ACCESS_LOG, else off).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the coordination server (JSON API under /v0, OpenAPI at /docs); it makes its
    database on first start and logs one line per event to stderr."""
    from quorumbench.cli.server_cmd import serve

    serve(
        host,
        port,
        database_url,
        data_dir,
        queue,
        datasets_dir,
        console,
        log_level=log_level,
        log_format=log_format,
        access_log=access_log,
    )


@db_app.command("upgrade")
@handle_errors
def db_upgrade_command(
    database_url: DatabaseUrl = None, data_dir: DataDir = None, create: Create = False
) -> None:
    """Apply pending schema migrations (the server also does this at start)."""
    from quorumbench.cli.server_cmd import db_upgrade

    db_upgrade(database_url, data_dir, create, console)


@account_app.command("create")
@handle_errors
def account_create_command(
    name: Annotated[str, typer.Argument(help="Account name (lowercase).")],
    admin: Annotated[bool, typer.Option("--admin", help="Make it an admin account.")] = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    create: Create = False,
) -> None:
    """Create an account in the server's database (named in the answer)."""
    from quorumbench.cli.server_cmd import account_create

    account_create(name, admin, database_url, data_dir, create, console)


@token_app.command("issue")
@handle_errors
def token_issue_command(
    account: Annotated[str, typer.Argument(help="Account name.")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="task:pull, task:submit, model:register, benchmark:create or admin "
            "(repeat; default: the first three).",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A label for the token.")] = "default",
    expires_days: Annotated[
        int | None, typer.Option("--expires-days", min=1, help="Expiry; default never.")
    ] = None,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Issue an API token; it is printed once and only its hash is stored."""
    from quorumbench.cli.server_cmd import token_issue

    token_issue(account, scope, name, expires_days, database_url, data_dir, console)


@log_app.command("rotate-key")
@handle_errors
def log_rotate_key_command(
    new_key_file: Annotated[
        Path,
        typer.Option(
            "--new-key-file",
            dir_okay=False,
            help="The new Ed25519 key (PEM); made there (mode 0600) if the file is missing.",
        ),
    ],
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Hand the public log to a new signing key: the current key (QB_LOG_KEY_FILE or
    QB_LOG_KEY) and the new one sign a statement naming both, which `verify` follows."""
    from quorumbench.cli.server_cmd import log_rotate_key

    log_rotate_key(new_key_file, database_url, data_dir, console)


@app.command("leaderboard")
@handle_errors
def leaderboard_command(
    server: Annotated[str, typer.Option("--server", help="Server URL.")] = "http://127.0.0.1:8000",
    benchmark: Annotated[
        str | None, typer.Option("--benchmark", "-b", help="One benchmark; default: aggregate.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Rows.")] = 20,
) -> None:
    """Print the server's leaderboard as a table."""
    from quorumbench.cli.server_cmd import leaderboard

    leaderboard(server, benchmark, limit, console)


@app.command("login")
@handle_errors
def login_command(
    server: Annotated[str, typer.Option("--server", help="Server URL.")] = "http://127.0.0.1:8000",
    provider: Annotated[
        str, typer.Option("--provider", help="Login provider configured on the server.")
    ] = "github",
) -> None:
    """Log in through the provider's device flow; the session is kept in a 0600 file
    ($XDG_CONFIG_HOME/quorumbench/sessions.json)."""
    from quorumbench.cli.login_cmd import login

    login(server, provider, console)


@app.command("verify")
@handle_errors
def verify_command(
    server: Annotated[str, typer.Option("--server", help="Server URL.")] = "http://127.0.0.1:8000",
    state: Annotated[
        Path | None,
        typer.Option(
            "--state",
            dir_okay=False,
            help="What earlier runs saw (pinned key, tree heads); default: "
            "$XDG_STATE_HOME/quorumbench/verify/<server>.json.",
        ),
    ] = None,
    datasets_dir: DatasetsDir = None,
) -> None:
    """Check a server's public log and leaderboard; exit 1 on any mismatch."""
    from quorumbench.cli.verify_cmd import default_state_file, verify
    from quorumbench.settings import get_settings

    data = datasets_dir or get_settings().datasets_dir
    report = verify(server, state or default_state_file(server), console, data)
    console.print(
        f"log size {report.size}: {report.entries} entries, {report.heads_checked} tree "
        f"head(s), {report.rows_compared} leaderboard rows, {report.signatures_checked} "
        f"runner signatures, {report.predictions_checked} predictions digests, the "
        f"sample ids of {report.samples_checked} tasks, the chance levels of "
        f"{report.chance_checked} rows, the payouts of {report.payouts_checked} settled "
        f"pool(s) and {report.edge_signatures_checked} edge reports checked"
    )
    if report.key_rotations:
        console.print(
            f"followed {report.key_rotations} rotation(s) of the log key, each signed by the "
            "key before it"
        )
    if report.retired_models:
        console.print(
            f"{len(report.retired_models)} retired model(s) are in the log and off the board "
            f"(models {', '.join(map(str, sorted(report.retired_models)))})"
        )
    if report.unsigned_results:
        console.print(f"{report.unsigned_results} result(s) in the log carry no signature")
    if report.results_without_predictions:
        console.print(
            f"{report.results_without_predictions} result(s) in the log predate predictions "
            "(no predictions digest to check)"
        )
    for reason, count in sorted(report.samples_unchecked.items()):
        console.print(f"sample ids not re-derived for {count} task(s): {escape(reason)}")
    for problem in report.problems:
        err_console.print(
            f"[bold red]mismatch:[/] {escape(str(problem))}", highlight=False, soft_wrap=True
        )
    if report.problems:
        raise typer.Exit(1)
    console.print("[green]everything verifies[/]")


app.command("demo")(handle_errors(demo_command))
app.command("ask")(handle_errors(ask_command))
app.command("edge")(handle_errors(edge_command))
app.command("export-site")(handle_errors(export_site_command))
model_app.command("register")(handle_errors(model_register_command))
model_app.command("list")(handle_errors(model_list_command))
model_app.command("retire")(handle_errors(model_retire_command))
account_app.command("show")(handle_errors(account_show_command))
account_app.command("grant")(handle_errors(account_grant_command))
account_app.command("revoke")(handle_errors(account_revoke_command))
benchmark_app.command("create")(handle_errors(benchmark_create_command))
benchmark_app.command("show")(handle_errors(benchmark_show_command))
benchmark_app.command("retire")(handle_errors(benchmark_retire_command))
token_app.command("list")(handle_errors(token_list_command))
token_app.command("revoke")(handle_errors(token_revoke_command))
install_pool_commands(handle_errors)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="quorumbench")


if __name__ == "__main__":  # pragma: no cover
    main()
