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
``yaml-malformed`` or ``unknown-key``) and nothing is sent anywhere. The API token is
read from ``QB_TOKEN`` only: never a flag, so it stays out of shell history and the
process list.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console

from quorumbench.cli._console import escape
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    NotFoundError,
    PermissionDeniedError,
    QuorumError,
    RateLimitedError,
    RegistrationError,
    ServerUnavailableError,
)

if TYPE_CHECKING:  # imported when a command runs: the services pull in the database layer
    from quorumbench.services.submissions import Inspector, Submission, SubmissionReport
    from quorumbench.settings import ServerSettings

TOKEN_ENV = "QB_TOKEN"
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
            help="Ask this server for its report (token from QB_TOKEN, scope model:register); "
            "without it the model checks run here and the account's are not made.",
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
            help="The server to register with (token from QB_TOKEN, scope model:register).",
            show_default=False,
        ),
    ],
) -> None:
    """Register a submission file's model (after a merge); a repeat answers the same model."""
    from quorumbench.cli.app import console, handle_errors  # app.py imports this module

    handle_errors(apply_file)(file, server, console)


def validate_file(path: Path, server: str | None, json_output: bool, console: Console) -> None:
    from quorumbench.services.submissions import offline_report

    submission = _read(path, json_output, console)
    if server is None:
        report = offline_report(_offline_settings(), submission, _inspector())
        document = report.model_dump(mode="json")
    else:
        with ServerClient(server, _token()) as client:
            document, report = client.validate(submission)
    _show(console, path, report, document, json_output)
    if not report.ok:
        raise typer.Exit(1)


def apply_file(path: Path, server: str, console: Console) -> None:
    submission = _read(path, False, console)
    with ServerClient(server, _token()) as client:
        document, report = client.validate(submission)
        _show(console, path, report, document, False)
        first = next((f for f in report.findings if f.level == "error"), None)
        if first is not None:
            raise RegistrationError(first.message, check=first.code)
        model, created = client.register(submission)
    what = "registered" if created else "already registered by this account"
    console.print(
        f"{what}: model {model.get('id')}, {escape(model.get('ref'))} "
        f"({escape(client.url)}/models/{model.get('id')})",
        highlight=False,
    )


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
        _show(console, path, report, report.model_dump(mode="json"), json_output)
        raise typer.Exit(1)
    return reading.submission


def _show(
    console: Console,
    path: Path,
    report: SubmissionReport,
    document: dict[str, Any],
    json_output: bool,
) -> None:
    from quorumbench.cli._submission_report import print_json, print_report

    if json_output:
        print_json(console, document)
    else:
        print_report(console, report, f"{path}: {report.ref or 'no ref'}")


def _token() -> str:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(
            f"set {TOKEN_ENV} to an API token with the model:register scope (the account "
            "page makes one)"
        )
    return token


def _offline_settings() -> ServerSettings:
    """The server's settings as this machine's environment sets them (QB_MAX_PARAMS,
    QB_LICENSE_ALLOWLIST, QB_ALLOW_PICKLE…). Not a ``.env`` file: the file validated
    usually sits in a checkout of someone else's pull request, which could carry one."""
    from quorumbench.settings import ServerSettings

    return ServerSettings(_env_file=None)


def _inspector() -> Inspector:
    from quorumbench.services.model_metadata import inspect_model

    return inspect_model


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"detail": f"HTTP {response.status_code}"}


def _error(response: httpx.Response, server: str) -> QuorumError:
    """The error a server's refusal or failure reads as here."""
    problem = _problem(response)
    detail = str(problem.get("detail") or f"HTTP {response.status_code}")
    status = response.status_code
    if status == 401:
        return AuthenticationError(f"{server} refused the token in {TOKEN_ENV}: {detail}")
    if status == 403:
        return PermissionDeniedError(detail)
    if status == 404:
        return NotFoundError(f"{server} has no submissions API ({detail}): is it a server URL?")
    if status == 429:
        retry = response.headers.get("retry-after", "")
        return RateLimitedError(detail, int(retry) if retry.isdigit() else None)
    if status >= 500:
        return ServerUnavailableError(f"{server} failed: {detail}", status)
    return RegistrationError(detail)


class ServerClient:
    """The two calls this command makes, with the token."""

    def __init__(self, server: str, token: str) -> None:
        url = server.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--server {server!r} is not an http:// or https:// URL")
        self.url = url
        self._http = httpx.Client(
            base_url=url, timeout=120.0, headers={"Authorization": f"Bearer {token}"}
        )

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _post(self, path: str, submission: Submission) -> httpx.Response:
        body = {"ref": submission.ref, "name": submission.name, "family": submission.family}
        try:
            return self._http.post(path, json={k: v for k, v in body.items() if v is not None})
        except httpx.HTTPError as exc:
            raise ServerUnavailableError(f"cannot reach {self.url}: {exc}") from None

    def validate(self, submission: Submission) -> tuple[dict[str, Any], SubmissionReport]:
        """The server's report: its JSON document as answered, and parsed."""
        from quorumbench.services.submissions import SubmissionReport

        answer = self._post("/v0/submissions/validate", submission)
        if answer.status_code != 200:
            raise _error(answer, self.url)
        document = _problem(answer)
        try:
            return document, SubmissionReport.model_validate(document)
        except ValidationError:
            raise ServerUnavailableError(
                f"{self.url} did not answer a submission report: {answer.text[:200]}"
            ) from None

    def register(self, submission: Submission) -> tuple[dict[str, Any], bool]:
        """The registered model, and whether it is new (201) or a repeat (200)."""
        answer = self._post("/v0/models", submission)
        if answer.status_code not in (200, 201):
            raise _error(answer, self.url)
        return _problem(answer), answer.status_code == 201
