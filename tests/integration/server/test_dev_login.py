"""The development login: off by default, loud when on, never on a public address."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.cli.app import app as cli
from quorumbench.errors import ConfigError, NotFoundError
from quorumbench.services.accounts import create_account
from quorumbench.services.sessions import login_for_development
from quorumbench.settings import ServerSettings

from ..operator.harness import free_port
from .test_api import assert_problem, auth


def client_for(ctx) -> TestClient:
    return TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False))


def test_it_is_off_by_default_and_then_there_is_no_such_endpoint(make_ctx):
    assert ServerSettings.model_fields["insecure_dev_login"].default is False
    ctx = make_ctx()
    create_account(ctx, "alice")
    with client_for(ctx) as client:
        answer = client.post("/v0/auth/dev-login", json={"account": "alice"})
        assert_problem(answer, 404, "not-found")
        assert "/v0/auth/dev-login" not in client.get("/openapi.json").json()["paths"]
    with pytest.raises(NotFoundError, match="QB_INSECURE_DEV_LOGIN"):
        login_for_development(ctx, "alice", None)  # the service refuses on its own too


def test_when_on_anyone_gets_a_session_and_the_start_warns(make_ctx, caplog):
    ctx = make_ctx(insecure_dev_login=True)
    create_account(ctx, "root", is_admin=True)
    with caplog.at_level(logging.WARNING, logger="quorumbench.api"), client_for(ctx) as client:
        assert any("INSECURE" in r.getMessage() for r in caplog.records)
        session = client.post("/v0/auth/dev-login", json={"account": "newcomer"})
        assert session.status_code == 200, session.text
        assert session.json()["scope"] == "model:register task:pull task:submit"
        token = session.json()["access_token"]
        assert client.get("/v0/me/quota", headers=auth(token)).status_code == 200
        admin = client.post("/v0/auth/dev-login", json={"account": "root", "scopes": ["admin"]})
        assert admin.json()["scope"] == "admin"
        refused = client.post(
            "/v0/auth/dev-login", json={"account": "newcomer", "scopes": ["admin"]}
        )
        assert_problem(refused, 403, "forbidden", "admin")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_it_may_listen_on_loopback(host):
    ServerSettings(insecure_dev_login=True).check_listen_address(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "qb.example.org"])
def test_it_refuses_to_listen_anywhere_else(host):
    ServerSettings().check_listen_address(host)  # fine while the flag is off
    with pytest.raises(ConfigError, match="QB_INSECURE_DEV_LOGIN"):
        ServerSettings(insecure_dev_login=True).check_listen_address(host)


def test_serve_refuses_to_start_with_it_on_a_public_address(tmp_path, monkeypatch):
    started: list[tuple[str, int]] = []

    def run(server, sockets=None):
        started.extend(sock.getsockname()[:2] for sock in sockets)

    monkeypatch.setattr("uvicorn.Server.run", run)
    env = {
        "QB_INSECURE_DEV_LOGIN": "true",
        "QB_DATA_DIR": str(tmp_path),
        "QB_BENCHMARKS": '["arith"]',  # the default list reads GSM8K from the Hub
    }
    runner = CliRunner()
    refused = runner.invoke(cli, ["serve", "--host", "0.0.0.0"], env=env)
    assert refused.exit_code == 1
    assert "refused on '0.0.0.0'" in " ".join(refused.output.split())
    assert "Traceback" not in refused.output and not started
    port = free_port()
    local = runner.invoke(cli, ["serve", "--host", "127.0.0.1", "--port", str(port)], env=env)
    assert local.exit_code == 0, local.output
    assert "INSECURE" in local.output and started == [("127.0.0.1", port)]
