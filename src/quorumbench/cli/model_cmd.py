"""``quorumbench model register | list | retire``: models on a server, over its HTTP API.

``register`` asks the server for the submission report first
(``POST /v0/submissions/validate``) and prints it as the site does; unless the report
has an error or ``--dry-run`` is given, it then registers (``POST /v0/models``). A
refusal, including one the registration itself answers (its problem's ``report``
member), exits 1 with the first error's sentence on stderr.

``--json`` prints JSON only, on stdout: ``register`` one object,
``{"report": …, "model": … or null, "created": bool}``; the others the server's answer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from quorumbench.cli._console import cell
from quorumbench.errors import ServerUnavailableError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from quorumbench.cli._http import Api
    from quorumbench.services.submissions.report import SubmissionReport

M = TypeVar("M", bound="BaseModel")

ServerOption = Annotated[
    str,
    typer.Option("--server", help="Server URL (the one `quorumbench login --server` was given)."),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the server's answer as JSON, and nothing else.")
]


PAGE = 1000
"""Models per request of the public list (the API's largest page)."""


def stdout_console() -> Console:
    from quorumbench.cli.app import console  # app.py imports this module

    return console


def emit_json(data: Any) -> None:
    """``data`` as indented JSON on stdout, and nothing else."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def parse_answer(server: str, schema: type[M], data: Any) -> M:
    """``data`` read as ``schema``: a server of another version is one clear error."""
    from pydantic import ValidationError

    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ServerUnavailableError(
            f"{server} answered a {schema.__name__} this client cannot read "
            f"({exc.error_count()} problem(s)); is it a QuorumBench server of this version?"
        ) from None


def parse_report(server: str, data: Any) -> SubmissionReport:
    from quorumbench.services.submissions.report import SubmissionReport

    return parse_answer(server, SubmissionReport, data)


class Registration(NamedTuple):
    """What the server answered: its report (as sent, and read), and the model."""

    raw: dict[str, Any]
    report: SubmissionReport
    model: dict[str, Any] | None
    """None when nothing was registered: the report has an error, or only validated."""
    created: bool
    """False for the owner's repeat, which answers the model registered the first time."""


def register_body(ref: str, name: str | None, family: str | None) -> dict[str, str]:
    """The body of ``POST /v0/submissions/validate`` and ``POST /v0/models``."""
    body = {"ref": ref}
    body.update({key: value for key, value in (("name", name), ("family", family)) if value})
    return body


def validate_and_register(api: Api, body: dict[str, str], *, register: bool) -> Registration:
    """The server's report (``POST /v0/submissions/validate``) and, when it has no error
    and ``register``, the registration (``POST /v0/models``). A registration refused
    with a report (its problem's ``report`` member) answers that report."""
    from quorumbench.cli._http import ApiError
    from quorumbench.cli._report import refusal

    raw = api.post("/v0/submissions/validate", body)
    report = parse_report(api.server, raw)
    if not report.ok or not register:
        return Registration(raw, report, None, False)
    try:
        answer = api.request("POST", "/v0/models", json=body)
    except ApiError as exc:  # validated, then refused: the registration's report
        raw = exc.problem.get("report")
        if not isinstance(raw, dict):
            raise
        report = parse_report(api.server, raw)
        if refusal(report) is None:
            raise
        return Registration(raw, report, None, False)
    return Registration(raw, report, answer.json(), answer.status_code == 201)


def model_register_command(
    ref: Annotated[
        str,
        typer.Argument(help="Model ref: hf:owner/name[@revision], gguf:, openai: or bundled:."),
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Only validate: print the report, register nothing."),
    ] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="Display name (default: detected).")
    ] = None,
    family: Annotated[
        str | None, typer.Option("--family", help="Model family (default: detected).")
    ] = None,
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Validate a model ref on the server and register it (talks to the server: QB_TOKEN,
    else the `quorumbench login` session); the report is printed either way."""
    from quorumbench.cli._http import Api
    from quorumbench.cli._report import print_report, refusal

    console = stdout_console()
    with Api(server) as api:
        done = validate_and_register(api, register_body(ref, name, family), register=not dry_run)
        if as_json:
            emit_json({"report": done.raw, "model": done.model, "created": done.created})
        else:
            print_report(console, done.report, api.server)
        refused = refusal(done.report)
        if refused is not None:
            raise refused
        model = done.model
        if not as_json and model is not None:
            verb = "registered" if done.created else "registered already (yours; nothing changed)"
            console.print(
                Text.assemble(
                    (verb, "bold green"),
                    f": model {model['id']} {model['name']} ({model['ref']}) "
                    f"{api.server}/models/{model['id']}",
                )
            )
        elif not as_json and dry_run:
            console.print(Text("dry run: nothing was registered"))


def _state(model: dict[str, Any]) -> str:
    if model.get("retired_at"):
        return "retired"
    if model.get("paused_at"):
        return "paused"
    return "active"


def _params(model: dict[str, Any]) -> str:
    size = model.get("effective_params") or model.get("params")
    return f"{size:,}" if isinstance(size, int) else "—"


def public_models(api: Api) -> list[dict[str, Any]]:
    """Every model on the server, page by page (``GET /v0/models``)."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = api.public("/v0/models", {"limit": PAGE, "after_id": after})
        if not isinstance(page, list):
            raise ServerUnavailableError(f"{api.server} answered the model list with {page!r}")
        found.extend(page)
        if len(page) < PAGE:
            return found
        after = page[-1]["id"]


def models_table(models: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("id", "name", "ref", "parameters", "status", "registered"):
        table.add_column(column, overflow="fold", justify="right" if column == "id" else "left")
    for model in models:
        table.add_row(
            str(model["id"]),
            cell(model["name"]),
            cell(model["ref"]),
            _params(model),
            _state(model),
            cell(str(model["created_at"])[:16].replace("T", " ")),
        )
    if not models:
        table.caption = "no models"
    return table


def owned_table(owned: list[dict[str, Any]]) -> Table:
    table = Table(title="your models", title_justify="left")
    columns = ("id", "name", "ref", "status", "done", "disputed", "open", "page")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in owned:
        model = row["model"]
        table.add_row(
            str(model["id"]),
            cell(model["name"]),
            cell(model["ref"]),
            cell(row["status"]),
            str(row["tasks_done"]),
            str(row["tasks_disputed"]),
            str(row["tasks_open"]),
            cell(row["url"]),
        )
    if not owned:
        table.caption = "no models yet: `quorumbench model register REF`"
    return table


def model_list_command(
    mine: Annotated[
        bool,
        typer.Option(
            "--mine", help="Only your account's models, with their status (needs a credential)."
        ),
    ] = False,
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """List the server's models, or yours with their status: pending, ranked, disputed,
    paused, retired (talks to the server)."""
    from quorumbench.cli._http import Api

    console = stdout_console()
    with Api(server) as api:
        if mine:
            owned = api.get("/v0/me/models")
            if as_json:
                emit_json(owned)
            else:
                for row in owned:
                    row["url"] = f"{api.server}{row['url']}"
                console.print(owned_table(owned))
            return
        models = public_models(api)
        if as_json:
            emit_json(models)
        else:
            console.print(models_table(models, f"models on {api.server}"))


def model_retire_command(
    model_id: Annotated[int, typer.Argument(metavar="ID", min=1, help="The model's id.")],
    as_json: JsonOption = False,
    server: ServerOption = "http://127.0.0.1:8000",
) -> None:
    """Retire one of your models: off the board and the schedule, its history kept (talks
    to the server; another account's model is not found)."""
    from quorumbench.cli._http import Api

    with Api(server) as api:
        model = api.post(f"/v0/models/{model_id}/retire")
    if as_json:
        emit_json(model)
        return
    stdout_console().print(
        Text.assemble(
            ("retired", "bold"),
            f": model {model['id']} {model['name']} ({model['ref']}) at {model['retired_at']}",
        )
    )
