"""``quorumbench model``, ``token list|revoke`` and ``account show`` against a real server
(uvicorn in a thread, SQLite, fake model metadata: ``hf:`` refs need no Hub); and
``submission validate --server`` and ``submission apply``, which ask the server through
the same client (test_submission_files tests them against a local Hub).

In process through CliRunner, and once as a subprocess as a user runs it. Credentials:
``QB_TOKEN`` (an API token), else the session ``quorumbench login`` keeps per server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli import _http as http_module
from quorumbench.cli._http import _json, answer_error
from quorumbench.cli.app import app
from quorumbench.cli.login_cmd import save_session
from quorumbench.errors import RateLimitedError, ServerUnavailableError
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..server.conftest import fake_metadata, hub_ref
from ..templates import migrated_sqlite

runner = CliRunner()
BIG = "hf:org/big-model@" + "b" * 40
"""Fake metadata gives it 10**12 parameters: over the limit, a refusal."""


@dataclass
class World:
    url: str
    tokens: dict[str, str]
    config: Path
    ctx: Any = None
    """The server's context (to make accounts and tokens directly)."""

    def cli(self, *args: str, who: str | None = "owner", server: str | None = None) -> Any:
        """``quorumbench ARGS --server URL`` as ``who`` (QB_TOKEN), or with the saved
        session (``who=None``)."""
        env = {
            "XDG_CONFIG_HOME": str(self.config),
            "QB_TOKEN": self.tokens[who] if who else None,
            "COLUMNS": "250",
        }
        return runner.invoke(app, [*args, "--server", server or self.url], env=env)

    def models(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = httpx.get(f"{self.url}/v0/models").json()
        return found

    def validate(self, ref: str, who: str = "owner") -> dict[str, Any]:
        answer = httpx.post(
            f"{self.url}/v0/submissions/validate",
            json={"ref": ref},
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
        )
        assert answer.status_code == 200, answer.text
        report: dict[str, Any] = answer.json()
        return report

    def login(self, who: str) -> str:
        """Save a session for ``who`` as `quorumbench login` does; its refresh token."""
        session = httpx.post(
            f"{self.url}/v0/auth/token", json={"api_token": self.tokens[who]}
        ).json()
        session["account"] = who
        path = self.config / "quorumbench" / "sessions.json"
        save_session(path, self.url, "github", session)
        token: str = session["refresh_token"]
        return token

    def saved_refresh_token(self) -> str:
        saved = json.loads((self.config / "quorumbench" / "sessions.json").read_text())
        token: str = saved["servers"][self.url]["refresh_token"]
        return token


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[..., World]]:
    servers: list[EmbeddedServer] = []
    contexts: list[Any] = []

    def make(**overrides: Any) -> World:
        where = tmp_path / f"server{len(servers)}"
        settings = ServerSettings(
            data_dir=where,
            database_url=migrated_sqlite(tmp_path / f"qb{len(servers)}.db"),
            benchmarks=["arith"],
            quota_evaluations=0,
            registrations_per_week=3,
            canary_rate=0.0,
            **overrides,
        )
        ctx = build_context(settings)
        contexts.append(ctx)
        ctx.inspector = lambda ref: fake_metadata(
            ref, params=10**12 if "big" in ref else 1000, weights=ref.encode().hex()[:64]
        )
        create_account(ctx, "owner")
        create_account(ctx, "other")
        tokens = {name: issue_token(ctx, name).token for name in ("owner", "other")}
        tokens["pull-only"] = issue_token(ctx, "owner", scopes=("task:pull",), name="pull").token
        server = EmbeddedServer(create_app(settings, context=ctx, run_scheduler=False))
        server.start()
        servers.append(server)
        return World(server.url, tokens, tmp_path / "config", ctx)

    yield make
    for server in servers:
        server.stop()
    for ctx in contexts:
        ctx.close()


@pytest.fixture
def world(make_world: Callable[..., World]) -> World:
    return make_world()


def flat(text: str) -> str:
    """``text`` on one line, table borders and runs of spaces left out."""
    return " ".join(re.sub("[│┃]", " ", text).split())


def test_a_dry_run_prints_the_report_and_registers_nothing(world):
    result = world.cli("model", "register", hub_ref(1), "--dry-run", "--name", "Model One")
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "accepted: registering it would succeed now" in out
    for part in ("findings", "limits-ok", "cost-estimate", "detected metadata", "Model One"):
        assert part in out
    assert "quota 0 of 0 accepted evaluations counted in the last 24 h; still owed: 0" in out
    assert "registrations (7 days) 0 of 3" in out
    assert "cost estimate (an estimate, not a measurement" in out
    assert "dry run: nothing was registered" in out
    assert world.models() == []


def test_register_then_repeat_by_the_owner(world):
    first = world.cli("model", "register", hub_ref(1))
    assert first.exit_code == 0, first.output
    out = flat(first.stdout)
    assert "registered: model 1 " in out and f"({hub_ref(1)}) {world.url}/models/1" in out
    again = world.cli("model", "register", hub_ref(1))
    assert again.exit_code == 0, again.output
    out = flat(again.stdout)
    assert "already-registered" in out
    assert "registered already (yours; nothing changed): model 1" in out
    assert [m["id"] for m in world.models()] == [1]


def test_a_refusal_exits_1_with_the_first_errors_sentence(world):
    sentence = next(f["message"] for f in world.validate(BIG)["findings"] if f["level"] == "error")
    result = world.cli("model", "register", BIG)
    assert result.exit_code == 1
    assert "params-over-limit" in result.stdout and "refused" in result.stdout
    assert result.stderr.strip().splitlines() == [f"error: {sentence}"]
    assert world.models() == []


def test_a_duplicate_points_at_the_registered_model(world):
    assert world.cli("model", "register", hub_ref(2), who="other").exit_code == 0
    result = world.cli("model", "register", hub_ref(2))
    assert result.exit_code == 1
    out = flat(result.stdout)
    assert "duplicate-ref" in out
    assert "registered already (another account's): model 1 " in out
    assert f"{world.url}/models/1" in out
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_json_outputs_parse(world):
    dry = json.loads(world.cli("model", "register", hub_ref(3), "--dry-run", "--json").stdout)
    assert dry["report"]["ok"] is True and dry["model"] is None and dry["created"] is False
    done = world.cli("model", "register", hub_ref(3), "--json")
    assert done.exit_code == 0, done.output
    registered = json.loads(done.stdout)
    assert registered["created"] is True and registered["model"]["ref"] == hub_ref(3)
    assert registered["report"]["metadata"]["params"] == 1000
    refused = world.cli("model", "register", BIG, "--json")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["report"]["ok"] is False
    assert [m["id"] for m in json.loads(world.cli("model", "list", "--json").stdout)] == [1]
    mine = json.loads(world.cli("model", "list", "--mine", "--json").stdout)
    assert [(row["model"]["id"], row["status"]) for row in mine] == [(1, "pending")]
    account = json.loads(world.cli("account", "show", "--json").stdout)
    assert account["name"] == "owner" and len(account["models"]) == 1
    tokens = json.loads(world.cli("token", "list", "--json").stdout)
    assert {t["name"] for t in tokens} == {"default", "pull"}
    retired = json.loads(world.cli("model", "retire", "1", "--json").stdout)
    assert retired["retired_at"] is not None


def test_list_all_and_mine_with_status(world):
    assert world.cli("model", "register", hub_ref(4)).exit_code == 0
    assert world.cli("model", "register", hub_ref(5), who="other").exit_code == 0
    everyone = world.cli("model", "list", who=None)  # the public list needs no credential
    assert everyone.exit_code == 0, everyone.output
    out = flat(everyone.stdout)
    assert hub_ref(4) in out and hub_ref(5) in out and "active" in out
    mine = world.cli("model", "list", "--mine")
    assert mine.exit_code == 0, mine.output
    out = flat(mine.stdout)
    assert hub_ref(4) in out and hub_ref(5) not in out
    assert "pending" in out and f"{world.url}/models/1" in out


def test_retire_your_model_and_not_someone_elses(world):
    assert world.cli("model", "register", hub_ref(6)).exit_code == 0
    assert world.cli("model", "register", hub_ref(7), who="other").exit_code == 0
    retired = world.cli("model", "retire", "1")
    assert retired.exit_code == 0, retired.output
    assert "retired: model 1 " in flat(retired.stdout) and hub_ref(6) in retired.stdout
    assert "retired" in flat(world.cli("model", "list", "--mine").stdout)
    theirs = world.cli("model", "retire", "2")
    assert theirs.exit_code == 1
    assert theirs.stderr.strip().splitlines() == [f"error: {world.url}: you have no model 2"]
    assert [m["retired_at"] is None for m in world.models()] == [False, True]


def test_token_list_and_revoke_then_the_token_is_refused(world):
    listed = world.cli("token", "list")
    assert listed.exit_code == 0, listed.output
    assert "pull" in listed.stdout and "task:pull" in listed.stdout
    assert world.tokens["pull-only"] not in listed.stdout  # never a secret
    tokens = json.loads(world.cli("token", "list", "--json").stdout)
    pull = next(t["id"] for t in tokens if t["name"] == "pull")
    revoked = world.cli("token", "revoke", str(pull))
    assert revoked.exit_code == 0, revoked.output
    assert f"revoked API token {pull}" in revoked.stdout
    refused = world.cli("token", "list", who="pull-only")
    assert refused.exit_code == 1
    assert refused.stderr.strip().splitlines() == [
        f"error: {world.url} refused the API token in QB_TOKEN: this API token was revoked"
    ]
    theirs = world.cli("token", "revoke", str(pull), who="other")
    assert theirs.exit_code == 1 and "has no API token" in theirs.stderr


def test_account_show(world):
    assert world.cli("model", "register", hub_ref(8)).exit_code == 0
    shown = world.cli("account", "show")
    assert shown.exit_code == 0, shown.output
    out = flat(shown.stdout)
    assert "account owner, id" in out and "model:register" in out
    assert "still owed: 0" in out and "registrations (7 days) 1 of 3" in out
    assert hub_ref(8) in out and "pending" in out
    assert "no runners yet" in out
    assert "2 API token(s) in use" in out


def test_the_saved_session_is_used_and_qb_token_wins(world):
    first = world.login("other")
    shown = world.cli("account", "show", who=None)
    assert shown.exit_code == 0, shown.output
    assert "account other," in flat(shown.stdout)
    rotated = world.saved_refresh_token()
    assert rotated != first  # the server spent the old one: the new one was kept
    assert world.cli("model", "list", "--mine", who=None).exit_code == 0
    assert world.saved_refresh_token() != rotated
    assert "account owner," in flat(world.cli("account", "show").stdout)  # QB_TOKEN set
    httpx.post(f"{world.url}/v0/auth/revoke", json={"refresh_token": world.saved_refresh_token()})
    ended = world.cli("account", "show", who=None)
    assert ended.exit_code == 1
    assert f"error: the session kept for {world.url} has ended" in flat(ended.stderr)


def test_a_session_another_command_rotated_meanwhile_is_followed(world, monkeypatch):
    spent = world.login("owner")
    assert world.cli("token", "list", who=None).exit_code == 0  # spends it, saves the next
    real = http_module._saved_session
    reads: list[str] = []

    def stale_first(path: Path, server: str) -> dict[str, Any]:
        entry = real(path, server)
        reads.append(entry["refresh_token"])
        return {**entry, "refresh_token": spent} if len(reads) == 1 else entry

    monkeypatch.setattr(http_module, "_saved_session", stale_first)
    result = world.cli("token", "list", who=None)
    assert result.exit_code == 0, result.output
    assert len(reads) == 2


def test_without_a_credential_the_error_says_how_to_log_in(world):
    result = world.cli("token", "list", who=None)
    assert result.exit_code == 1
    assert flat(result.stderr) == (
        f"error: not logged in to {world.url}: run `quorumbench login --server "
        f"{world.url}`, or set QB_TOKEN to an API token"
    )


def test_a_missing_scope_is_403_in_one_line(world):
    result = world.cli("model", "register", hub_ref(9), who="pull-only")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {world.url} does not allow it: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_too_many_requests_says_when_to_retry(make_world):
    world = make_world(submission_rate_limit="1/minute")
    assert world.cli("model", "register", hub_ref(10), "--dry-run").exit_code == 0
    result = world.cli("model", "register", hub_ref(10), "--dry-run")
    assert result.exit_code == 1
    line = flat(result.stderr)
    assert line.startswith(f"error: {world.url}: too many requests: ")
    assert "; retry after " in line and line.endswith(" s")


def test_an_unreachable_server_is_one_line(world):
    for args in (("model", "list"), ("token", "list"), ("account", "show")):
        result = world.cli(*args, server="http://127.0.0.1:9")
        assert result.exit_code == 1
        assert result.stderr.startswith("error: cannot reach http://127.0.0.1:9")
        assert "Traceback" not in result.output


def submission_file(folder: Path, ref: str) -> str:
    path = folder / "submission.yaml"
    path.write_text(f"model:\n  ref: {ref}\n  family: llama\n", encoding="utf-8")
    return str(path)


def test_submission_apply_uses_the_saved_session(world, tmp_path):
    world.login("owner")
    path = submission_file(tmp_path, hub_ref(12))
    checked = world.cli("submission", "validate", path, who=None)
    assert checked.exit_code == 0, checked.output
    assert "accepted: registering it would succeed now" in flat(checked.stdout)
    before = world.saved_refresh_token()
    applied = world.cli("submission", "apply", path, who=None)
    assert applied.exit_code == 0, applied.output
    assert f"registered: model 1, {hub_ref(12)} ({world.url}/models/1)" in flat(applied.stdout)
    assert world.saved_refresh_token() != before  # refreshed, and the new one kept
    [model] = world.models()
    assert model["ref"] == hub_ref(12) and model["family"] == "llama"
    assert "account owner," in flat(world.cli("account", "show", who=None).stdout)


def test_submission_apply_says_when_to_retry(make_world, tmp_path):
    world = make_world(submission_rate_limit="1/minute")
    result = world.cli("submission", "apply", submission_file(tmp_path, hub_ref(13)))
    assert result.exit_code == 1  # validated (the one request a minute), then refused: 429
    line = flat(result.stderr)
    assert line.startswith(f"error: {world.url}: too many requests: ")
    assert "; retry after " in line and line.endswith(" s")
    assert len(result.stderr.strip().splitlines()) == 1
    assert world.models() == []


@pytest.mark.parametrize("door", ["model", "submission"])
def test_a_registration_refused_with_a_report_prints_that_report(
    world, tmp_path, monkeypatch, door
):
    """Validated, then refused by ``POST /v0/models`` (e.g. a limit reached meanwhile):
    the refusal's own report is printed, and its first error is the one line."""
    refused = world.validate(BIG)
    sentence = next(f["message"] for f in refused["findings"] if f["level"] == "error")
    real = http_module.Api.request

    def refuse(self: Any, method: str, path: str, *, json: Any = None) -> httpx.Response:
        if path == "/v0/models":
            raise http_module.ApiError("refused", 422, {"report": refused})
        return real(self, method, path, json=json)

    monkeypatch.setattr(http_module.Api, "request", refuse)
    if door == "model":
        result = world.cli("model", "register", hub_ref(15))
    else:
        result = world.cli("submission", "apply", submission_file(tmp_path, hub_ref(15)))
    assert result.exit_code == 1
    assert "params-over-limit" in result.stdout and "refused" in result.stdout
    assert result.stderr.strip().splitlines() == [f"error: {sentence}"]
    assert world.models() == []


def test_submission_validate_without_a_credential_says_how_to_log_in(world, tmp_path):
    result = world.cli("submission", "validate", submission_file(tmp_path, hub_ref(14)), who=None)
    assert result.exit_code == 1
    assert flat(result.stderr) == (
        f"error: not logged in to {world.url}: run `quorumbench login --server "
        f"{world.url}`, or set QB_TOKEN to an API token"
    )


def test_server_failures_and_retry_after_read_from_the_answer():
    failed = answer_error("http://s", httpx.Response(503, json={"detail": "db down"}), "x")
    assert isinstance(failed, ServerUnavailableError)
    assert failed.message == "http://s failed (HTTP 503): db down; try again later"
    limited = answer_error(
        "http://s", httpx.Response(429, headers={"Retry-After": "17"}, text="slow"), "x"
    )
    assert isinstance(limited, RateLimitedError) and limited.retry_after == 17
    assert limited.message.endswith("; retry after 17 s")


def test_an_answer_that_is_not_json_is_one_clear_error():
    page = httpx.Response(200, text="<html>a proxy</html>", headers={"content-type": "text/html"})
    with pytest.raises(ServerUnavailableError, match="not JSON \\(text/html\\): is --server"):
        _json("http://s", page)


def test_the_installed_command_as_a_subprocess(world):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "QB_TOKEN": world.tokens["owner"]}
        env["XDG_CONFIG_HOME"] = str(world.config)
        return subprocess.run(
            [sys.executable, "-m", "quorumbench.cli.app", *args, "--server", world.url],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    refused = run("model", "register", BIG)
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: ") and "parameters" in refused.stderr
    done = run("model", "register", hub_ref(11), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["id"] == 1
    listed = run("model", "list", "--mine")
    assert listed.returncode == 0 and hub_ref(11) in listed.stdout
