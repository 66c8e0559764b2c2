"""One validation, three doors: the same ref gives the same report through the API,
the command line (``model register --dry-run``, ``submission validate --server``) and
the site's ``/submit`` form, on SQLite and PostgreSQL.

The models live on a local Hub (read through the real Hub client); the API and the
command line talk to a real uvicorn in a thread, the site's form is posted by a
signed-in browser (the development sign-in) to the same server's application.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app
from quorumbench.services.accounts import create_account, issue_token

from .cli.test_submission_files import (  # noqa: F401 (fixtures)
    SHA,
    db_url,
    hub,
    hub_context,
    pg_database,
)
from .server.test_header_only_metadata import hub_dir, local_hub  # noqa: F401 (fixtures)
from .web.browser import Browser

runner = CliRunner()
FINDING = re.compile(r'<li class="finding-(error|warning|info)" data-code="([a-z0-9-]+)">')


@dataclass
class Doors:
    url: str
    token: str
    browser: Browser
    folder: Path

    def api(self, ref: str) -> dict[str, Any]:
        answer = httpx.post(
            f"{self.url}/v0/submissions/validate",
            json={"ref": ref},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        assert answer.status_code == 200, answer.text
        report: dict[str, Any] = answer.json()
        return report

    def cli_register(self, ref: str) -> dict[str, Any]:
        result = runner.invoke(
            app,
            ["model", "register", ref, "--dry-run", "--json", "--server", self.url],
            env={"QB_TOKEN": self.token},
        )
        answer = json.loads(result.stdout)
        assert answer["model"] is None and answer["created"] is False
        report: dict[str, Any] = answer["report"]
        assert result.exit_code == (0 if report["ok"] else 1), result.output
        return report

    def cli_file(self, ref: str) -> dict[str, Any]:
        path = self.folder / "submission.yaml"
        path.write_text(f"model:\n  ref: {ref}\n", encoding="utf-8")
        result = runner.invoke(
            app,
            ["submission", "validate", str(path), "--json", "--server", self.url],
            env={"QB_TOKEN": self.token},
        )
        report: dict[str, Any] = json.loads(result.stdout)
        assert result.exit_code == (0 if report["ok"] else 1), result.output
        return report

    def site(self, ref: str) -> str:
        form = self.browser.form("/submit", "/submit/preview")
        page = self.browser.submit(form, ref=ref)
        assert page.status_code in (200, 422), page.text
        return page.text


@pytest.fixture
def doors(db_url, tmp_path, hub) -> Iterator[Doors]:  # noqa: F811
    ctx = hub_context(db_url, tmp_path, hub, insecure_dev_login=True)
    create_account(ctx, "author")
    token = issue_token(ctx, "author").token
    application = create_app(ctx.settings, context=ctx, run_scheduler=False)
    with EmbeddedServer(application) as embedded, Browser(application) as browser:
        browser.dev_signin("author")
        yield Doors(embedded.url, token, browser, tmp_path)
    ctx.close()


REFS = [
    f"hf:org/clean@{SHA}",  # accepted
    "hf:org/clean@main",  # pinned to its commit
    "hf:org/custom@main",  # remote code
    "hf:org/large@main",  # over the size limit
    "hf:org/nolicence@main",  # no licence found
    "hf:org/missing@main",  # no such repository
]


@pytest.mark.parametrize("ref", REFS)
def test_every_door_gives_the_same_report_for_the_same_ref(doors, ref):
    report = doors.api(ref)
    assert doors.cli_register(ref) == report
    assert doors.cli_file(ref) == report

    page = doors.site(ref)
    shown = [(level, code) for level, code in FINDING.findall(page)]
    assert shown == [(f["level"], f["code"]) for f in report["findings"]]
    for found in report["findings"]:
        assert str(escape(found["message"])) in page, found
    if report["metadata"] is not None:
        assert str(escape(report["metadata"]["ref"])) in page
    assert ('action="/submit/register"' in page) is report["ok"]
