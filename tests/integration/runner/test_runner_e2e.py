"""Three runners evaluate the real SmolLM2-135M against a live server until consensus."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import select
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app as cli
from quorumbench.db.models import Result
from quorumbench.runner.loop import build_runner
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.settings import RunnerSettings, ServerSettings

pytestmark = [pytest.mark.model, pytest.mark.slow]

RUNNERS = ("r1", "r2", "r3")


@pytest.fixture
def live(tmp_path, smollm2_gguf) -> Iterator[EmbeddedServer]:
    settings = ServerSettings(
        data_dir=tmp_path,
        quorum=3,
        samples_per_task=2,
        benchmarks=["arith"],
        scheduler_interval_s=0.2,
        registrations_per_week=100,
        quota_evaluations=0,
        canary_rate=0.0,
        # one epoch for the whole test: the server runs on the real clock, and an hour
        # that turned mid-test (CI, 2026-12-06, 19:00) gave the last runner the next
        # epoch's task where the test expects no work
        epoch_seconds=10**9,
    )
    with EmbeddedServer(create_app(settings)) as server:
        yield server


def init_runner(url: str, token: str, name: str, key_file: Path) -> None:
    """``quorumbench runner init``: make the runner's key and register it."""
    result = CliRunner().invoke(
        cli,
        ["runner", "init", "--server", url, "--name", name, "--key-file", str(key_file)],
        env={"QB_RUNNER_TOKEN": token},
    )
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_three_runners_reach_consensus_on_the_bundled_model(live, model_cache_dir, tmp_path):
    ctx = live.app.state.context
    create_account(ctx, "admin", is_admin=True)
    admin = issue_token(ctx, "admin", scopes=("admin",)).token
    tokens = {}
    for name in RUNNERS:
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name, scopes=("task:pull", "task:submit")).token

    with httpx.Client(base_url=live.url, timeout=120) as api:
        registered = api.post(
            "/v0/models",
            json={"ref": "bundled:smollm2-135m-instruct"},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert registered.status_code == 201, registered.text
        model = registered.json()

        outcomes = []
        for name in RUNNERS:
            key_file = tmp_path / f"{name}.key"
            init_runner(live.url, tokens[name], f"{name}-box", key_file)
            settings = RunnerSettings(
                _env_file=None,
                server_url=live.url,
                token=SecretStr(tokens[name]),
                name=f"{name}-box",
                key_file=key_file,
                cache_dir=model_cache_dir,
                device="cpu",
                batch_size=2,
            )
            with build_runner(settings) as runner:
                outcomes.append(runner.run_once())

        assert [o.status for o in outcomes] == ["submitted"] * 3, outcomes
        assert len({o.task_id for o in outcomes}) == 1
        assert outcomes[-1].detail == "task is DONE"

        task = api.get(f"/v0/tasks/{outcomes[0].task_id}").json()
        assert task["status"] == "DONE"
        # a GGUF file registered now runs on llama.cpp: every result says so (signed)
        with ctx.db.read() as session:
            made_by = session.scalars(
                select(Result.engine).where(Result.task_id == outcomes[0].task_id)
            ).all()
        assert made_by == ["llamacpp"] * 3
        board = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()
        rows = [r for r in board["rows"] if r["model_id"] == model["id"]]
        assert len(rows) == 1
        assert rows[0]["n_tasks"] == 1 and rows[0]["n_samples"] == 2
        assert 0 <= rows[0]["score"] <= 1

        # the model's owner (admin) is never offered its own model; the others are done
        with build_runner(
            RunnerSettings(
                _env_file=None,
                server_url=live.url,
                token=SecretStr(tokens["r1"]),
                name="r1-box",
                key_file=tmp_path / "r1.key",
            )
        ) as runner:
            assert runner.run_once().status == "no-work"
