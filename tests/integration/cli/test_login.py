"""``quorumbench login`` against a real server (uvicorn in a thread) and a fake GitHub.

The CLI's waits between polls move the server's clock instead of sleeping, so the
server sees exactly the intervals the CLI keeps.
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli import login_cmd
from quorumbench.cli.app import app
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..fake_github import USER_CODE, FakeGitHub
from ..templates import migrated_sqlite

runner = CliRunner()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def world(tmp_path, github, monkeypatch):
    """A server with the fake GitHub as its ``github`` provider; the CLI's sleeps recorded."""
    settings = ServerSettings(
        data_dir=tmp_path,
        database_url=migrated_sqlite(tmp_path / "qb.db"),
        benchmarks=["arith"],
        oauth_providers=[github.provider()],
    )
    ctx = build_context(settings)
    clock = ctx.clock = Clock()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += timedelta(seconds=seconds)

    monkeypatch.setattr(login_cmd, "_sleep", sleep)
    with EmbeddedServer(create_app(settings, context=ctx, run_scheduler=False)) as server:
        yield server, sleeps, tmp_path / "config"
    ctx.close()


def login(server, config, *extra):
    args = ["login", "--server", server.url + "/", *extra]
    return runner.invoke(app, args, env={"XDG_CONFIG_HOME": str(config)})


def test_login_waits_for_approval_and_keeps_the_session(world, github):
    server, sleeps, config = world
    github.device_script = ["authorization_pending", "slow_down", "ok"]
    result = login(server, config, "--provider", "github")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert USER_CODE in output and f"{github.url}/login/device" in output
    assert "Logged in to" in output and "as octocat through github" in output
    assert sleeps == [5, 5, 10]  # the interval, again while pending, 5 s more after slow_down
    path = config / "quorumbench" / "sessions.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())["servers"][server.url]
    assert saved["account"] == "octocat" and saved["provider"] == "github"
    assert "access_token" not in saved
    refreshed = httpx.post(
        f"{server.url}/v0/auth/refresh", json={"refresh_token": saved["refresh_token"]}
    )
    assert refreshed.status_code == 200, refreshed.text


def test_a_second_login_keeps_other_servers_sessions(world, github):
    server, _, config = world
    path = config / "quorumbench" / "sessions.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"servers": {"https://other.example": {"refresh_token": "x"}}}))
    github.device_script = ["ok"]
    assert login(server, config).exit_code == 0
    servers = json.loads(path.read_text())["servers"]
    assert set(servers) == {"https://other.example", server.url}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (["authorization_pending", "access_denied"], "error: the login was declined at github"),
        (["expired_token"], "error: the code expired before it was approved"),
    ],
)
def test_a_declined_or_expired_login_is_one_line_and_exit_1(world, github, script, message):
    server, _, config = world
    github.device_script = script
    result = login(server, config)
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (config / "quorumbench" / "sessions.json").exists()


def test_an_unknown_provider_or_server_is_one_line(world, tmp_path):
    server, _, config = world
    result = login(server, config, "--provider", "gitlab")
    assert result.exit_code == 1 and "error: no login provider 'gitlab'" in result.output
    gone = runner.invoke(app, ["login", "--server", "http://127.0.0.1:9"])
    assert gone.exit_code == 1 and "error: cannot reach http://127.0.0.1:9" in gone.output
