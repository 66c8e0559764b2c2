"""``quorumbench submission``: a pull request's submission file, validated and registered.

``validate FILE`` reads the file (``services/submissions/file.py``: its schema) and
prints the submission's validation report. Without ``--server`` the model checks run
here, with the service the server runs (``offline_report``: the ref, pinning, files,
remote code, size, licence), and the report says that the account's checks were not
made; with ``--server URL`` the server answers the report (``POST
/v0/submissions/validate``), exactly as its other doors show it. ``apply FILE
--server URL`` validates on the server, then registers (``POST /v0/models``): what a
leaderboard repository's workflow runs once the pull request is merged. Registering
the same file again from the same account answers with the model registered the
first time.

A file the schema refuses is reported here (its errors, with codes such as
``yaml-malformed`` or ``unknown-key``) and nothing is sent anywhere. The server is
asked as ``quorumbench model register`` asks it (``cli/_http.Api``, the report printed
by ``cli/_report``): with the API token in ``QB_TOKEN`` when it is set (never a flag,
so it stays out of shell history and the process list), else the session ``quorumbench
login`` kept for that server.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from quorumbench.cli._console import escape
from quorumbench.errors import ConfigError

if TYPE_CHECKING:  # imported when a command runs: the services pull in the database layer
    from quorumbench.services.submissions import Inspector, Submission, SubmissionReport
    from quorumbench.settings import ServerSettings

CREDENTIAL = "QB_TOKEN, else the `quorumbench login` session; scope model:register"
submission_app = typer.Typer(
    help="Validate and register submission files (a leaderboard repository's pull requests).",
    no_args_is_help=True,
)
FileArgument = Annotated[
    Path,
    typer.Argument(
        help="The submission file: YAML with model.hf_repo (and revision) or model.ref, "
        "optional model.name, model.family and notes (docs/submitting.md).",
        dir_okay=False,
        show_default=False,
    ),
]


@submission_app.command("validate")
def validate_command(
    file: FileArgument,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (the API's document).")
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help=f"Ask this server for its report ({CREDENTIAL}); without it the model "
            "checks run here and the account's are not made.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Validate a submission file; exit 1 when the report has an error."""
    from quorumbench.cli.app import console, handle_errors  # app.py imports this module

    handle_errors(validate_file)(file, server, json_output, console)


@submission_app.command("apply")
def apply_command(
    file: FileArgument,
    server: Annotated[
        str,
        typer.Option(
            "--server",
            help=f"The server to register with ({CREDENTIAL}).",
            show_default=False,
        ),
    ],
) -> None:
    """Register a submission file's model (after a merge); a repeat answers the same model."""
    from quorumbench.cli.app import console, handle_errors  # app.py imports this module

    handle_errors(apply_file)(file, server, console)


def validate_file(path: Path, server: str | None, json_output: bool, console: Console) -> None:
    from quorumbench.cli._http import Api
    from quorumbench.cli.model_cmd import parse_report
    from quorumbench.services.submissions import offline_report

    submission = _read(path, json_output, console)
    if server is None:
        report = offline_report(_offline_settings(), submission, _inspector())
        document = report.model_dump(mode="json")
    else:
        with Api(server) as api:
            document = api.post("/v0/submissions/validate", _body(submission))
            report = parse_report(api.server, document)
            server = api.server
    _show(console, path, report, document, json_output, server)
    if not report.ok:
        raise typer.Exit(1)


def apply_file(path: Path, server: str, console: Console) -> None:
    from quorumbench.cli._http import Api
    from quorumbench.cli._report import refusal
    from quorumbench.cli.model_cmd import validate_and_register

    submission = _read(path, False, console)
    with Api(server) as api:
        done = validate_and_register(api, _body(submission), register=True)
    _show(console, path, done.report, done.raw, False, api.server)
    refused = refusal(done.report)
    if refused is not None:
        raise refused
    if done.model is not None:
        model = done.model
        what = "registered" if done.created else "already registered by this account"
        console.print(
            f"{what}: model {model.get('id')}, {escape(model.get('ref'))} "
            f"({escape(api.server)}/models/{model.get('id')})",
            highlight=False,
        )


def _body(submission: Submission) -> dict[str, str]:
    from quorumbench.cli.model_cmd import register_body

    return register_body(submission.ref, submission.name, submission.family)


def _read(path: Path, json_output: bool, console: Console) -> Submission:
    """The file's submission; a refused file's report is printed and exits 1."""
    from quorumbench.services.submissions import read_submission_file

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    reading = read_submission_file(data)
    if reading.submission is None:
        report = reading.refusal_report()
        _show(console, path, report, report.model_dump(mode="json"), json_output, None)
        raise typer.Exit(1)
    return reading.submission


def _show(
    console: Console,
    path: Path,
    report: SubmissionReport,
    document: dict[str, Any],
    json_output: bool,
    server: str | None,
) -> None:
    """The report as JSON (the document as it is), or for people, after the file's name."""
    from quorumbench.cli._report import print_report
    from quorumbench.cli.model_cmd import emit_json

    if json_output:
        emit_json(document)
    else:
        console.print(Text.assemble(("file ", "bold"), str(path)))
        print_report(console, report, server)


def _offline_settings() -> ServerSettings:
    """The server's settings as this machine's environment sets them (QB_MAX_PARAMS,
    QB_LICENSE_ALLOWLIST, QB_ALLOW_PICKLE…). Not a ``.env`` file: the file validated
    usually sits in a checkout of someone else's pull request, which could carry one."""
    from quorumbench.settings import ServerSettings

    return ServerSettings(_env_file=None)


def _inspector() -> Inspector:
    from quorumbench.services.model_metadata import inspect_model

    return inspect_model
