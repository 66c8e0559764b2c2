"""A runner checks before it pulls, and a local mistake is not a task failure (issue 11).

A real server (uvicorn in a thread, SQLite) and the real command line, in process;
only the model is the scripted MockBackend (the task's model is a Hub ref that is
never downloaded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import select
from typer.testing import CliRunner

from quorumbench import protocol
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.cli.app import app as cli
from quorumbench.db.models import Lease
from quorumbench.errors import ModelLoadError, ServerUnavailableError
from quorumbench.runner.keys import create_key, key_file_for, keys_root, legacy_key_file
from quorumbench.runner.loop import TaskEvaluator, build_runner
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.settings import RunnerSettings, ServerSettings

from ..ports import free_port
from ..server.conftest import fake_metadata, hub_ref
from ..templates import migrated_sqlite

RUNNER = ("task:pull", "task:submit")


@dataclass
class World:
    server: EmbeddedServer
    settings: ServerSettings
    tmp: Path

    @property
    def url(self) -> str:
        return self.server.url

    def token(self, account: str, scopes: tuple[str, ...] = RUNNER) -> str:
        ctx = self.server.context
        if not hasattr(self, "_accounts"):
            self._accounts: set[str] = set()
        if account not in self._accounts:
            create_account(ctx, account)
            self._accounts.add(account)
        return issue_token(ctx, account, scopes=scopes).token

    def leases(self) -> list[tuple[str, str | None]]:
        with self.server.context.db.read() as session:
            rows = session.scalars(select(Lease).order_by(Lease.id))
            return [(row.state, row.failure) for row in rows]


def serve(settings: ServerSettings, datasets_dir: Path | None = None) -> EmbeddedServer:
    return EmbeddedServer(create_app(settings, datasets_dir=datasets_dir, run_scheduler=False))


def make_world(tmp_path: Path, benchmarks: list[str], datasets_dir: Path | None = None) -> Any:
    settings = ServerSettings(
        data_dir=tmp_path,
        database_url=migrated_sqlite(tmp_path / "qb.db"),
        benchmarks=benchmarks,
        quorum=3,
        samples_per_task=2,
        registrations_per_week=100,
        quota_evaluations=0,
        canary_rate=0.0,
    )
    server = serve(settings, datasets_dir)
    server.start()
    ctx = server.context
    ctx.inspector = fake_metadata
    create_account(ctx, "owner", is_admin=True)
    owner = issue_token(ctx, "owner", scopes=("admin",)).token
    with httpx.Client(base_url=server.url, timeout=30) as api:
        answer = api.post(
            "/v0/models", json={"ref": hub_ref(1)}, headers={"Authorization": f"Bearer {owner}"}
        )
        assert answer.status_code == 201, answer.text
    return World(server, settings, tmp_path)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A clean environment: its own config home, no runner variables, no .env."""
    for var in [v for v in os.environ if v.startswith("QB_RUNNER_")] + ["QB_DATASETS_DIR"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "config"


@pytest.fixture
def world(tmp_path, home) -> Iterator[World]:
    made = make_world(tmp_path, ["arith"])
    yield made
    made.server.stop()


def mock_evaluator(monkeypatch, **extra: Any) -> None:
    """``runner start`` evaluates with the scripted model (and ``extra`` loaders)."""

    def evaluator(**kwargs: Any) -> TaskEvaluator:
        kwargs.setdefault("backend_loader", lambda ref, options: MockBackend(lambda p: "#### 4"))
        return TaskEvaluator(**{**kwargs, **extra})

    monkeypatch.setattr("quorumbench.runner.loop.TaskEvaluator", evaluator)


def cli_run(*args: str, token: str | None = None, env: dict[str, str] | None = None) -> Any:
    full_env = dict(env or {})
    if token is not None:
        full_env["QB_RUNNER_TOKEN"] = token
    return CliRunner().invoke(cli, list(args), env=full_env)


def init(world: World, token: str, name: str = "box", *extra: str) -> Any:
    return cli_run("runner", "init", "--server", world.url, "--name", name, *extra, token=token)


def start(world: World, token: str, name: str = "box", *extra: str, env=None) -> Any:
    args = ["runner", "start", "--server", world.url, "--name", name, "--once", "--no-sandbox"]
    return cli_run(*args, *extra, token=token, env=env)


def last_line(result: Any) -> str:
    return result.output.strip().splitlines()[-1]


# --- the pre-flight ------------------------------------------------------------------


def test_two_accounts_with_one_runner_name_get_their_own_keys_and_both_work(
    world, home, monkeypatch
):
    mock_evaluator(monkeypatch)
    alice, bob = world.token("alice"), world.token("bob")
    assert init(world, alice).exit_code == 0
    made = init(world, bob)
    assert made.exit_code == 0, made.output
    assert "runner 'box' of account 'bob': made a new key" in made.output
    alice_key = key_file_for(world.url, "alice", "box")
    bob_key = key_file_for(world.url, "bob", "box")
    assert alice_key.is_file() and bob_key.is_file()
    assert alice_key.read_bytes() != bob_key.read_bytes()
    assert not legacy_key_file("box").exists()

    for token in (alice, bob):
        done = start(world, token)
        assert done.exit_code == 0, done.output
        assert "submitted" in done.output
        # off a terminal, progress is plain lines (CliRunner's output is not a terminal)
        assert ": 2/2 samples, " in done.output
    assert [state for state, _ in world.leases()] == ["SUBMITTED", "SUBMITTED"]


def test_another_accounts_key_is_refused_before_any_pull(world, tmp_path):
    """The reported bug: the key file was shared by runner name between accounts."""
    shared = tmp_path / "shared.key"
    alice, bob = world.token("alice"), world.token("bob")
    assert init(world, alice, "box", "--key-file", str(shared)).exit_code == 0
    refused = start(world, bob, "box", "--key-file", str(shared))
    assert refused.exit_code == 1, refused.output
    line = last_line(refused)
    assert line.startswith("error: runner 'box' of account 'bob' on http://127.0.0.1:")
    assert "has no registered key: run `quorumbench runner init --server" in line
    assert world.leases() == [], "nothing was pulled"

    assert init(world, bob, "box").exit_code == 0  # bob's own key, at bob's path
    refused = start(world, bob, "box", "--key-file", str(shared))
    assert refused.exit_code == 1
    assert "is not a key of runner 'box' of account 'bob'" in refused.output
    assert world.leases() == []


def test_a_legacy_key_file_is_adopted_only_by_the_runner_it_is_registered_to(
    world, home, monkeypatch
):
    mock_evaluator(monkeypatch)
    alice, bob = world.token("alice"), world.token("bob")
    legacy = legacy_key_file("box")
    assert init(world, alice, "box", "--key-file", str(legacy)).exit_code == 0  # the old layout

    refused = start(world, bob)
    assert refused.exit_code == 1
    assert "was not used: it is not an active key of this runner of account 'bob'" in (
        " ".join(refused.output.split())
    )
    assert world.leases() == []
    assert not key_file_for(world.url, "bob", "box").exists()

    adopted = start(world, alice)
    assert adopted.exit_code == 0, adopted.output
    new = key_file_for(world.url, "alice", "box")
    assert new.read_bytes() == legacy.read_bytes()
    assert [state for state, _ in world.leases()] == ["SUBMITTED"]


def test_a_token_that_cannot_submit_is_refused_before_pulling_and_makes_no_key(world, home):
    pull_only = world.token("alice", ("task:pull",))
    made = init(world, pull_only)
    assert made.exit_code == 1
    assert "lacks task:submit" in made.output
    assert not keys_root().exists() or not any(keys_root().rglob("*.key"))

    full = world.token("alice")
    assert init(world, full).exit_code == 0
    refused = start(world, pull_only)
    assert refused.exit_code == 1
    assert "--scope task:pull --scope task:submit" in " ".join(refused.output.split())
    assert world.leases() == []


def test_init_with_a_wrong_token_leaves_no_key_file(world, home):
    refused = init(world, "qb_" + "x" * 43)
    assert refused.exit_code == 1
    assert "refused the token (unknown API token)" in refused.output
    assert not keys_root().exists() or not any(keys_root().rglob("*"))


def test_a_revoked_key_is_refused_before_pulling(world):
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    key = create_key(key_file_for(world.url, "alice", "box"))  # the file init made
    with httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {alice}"}) as api:
        assert api.delete(f"/v0/runners/box/keys/{key.key_id}").status_code == 204
    refused = start(world, alice)
    assert refused.exit_code == 1
    assert "was revoked" in refused.output and "--rotate" in refused.output
    assert world.leases() == []


# --- what a refusal or an error does to the lease -------------------------------------


def runner_for(world: World, token: str, **evaluator: Any) -> Any:
    settings = RunnerSettings(
        _env_file=None, server_url=world.url, token=SecretStr(token), name="box", sandbox="none"
    )
    runner = build_runner(settings)
    evaluator.setdefault("backend_loader", lambda ref, options: MockBackend(lambda p: "#### 4"))
    runner.evaluator = TaskEvaluator(batch_size=2, **evaluator)
    return runner


def test_a_refused_submission_releases_the_lease_at_once(world):
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    with runner_for(world, alice) as runner:
        runner.client.key = create_key(world.tmp / "unregistered.key")  # signs, unknown here
        outcome = runner.run_once()
    assert outcome.status == "rejected" and outcome.ends_runner
    assert "is not a key of the runner that holds lease" in outcome.detail
    assert world.leases() == [("RELEASED", None)], "the slot reopened, no 600 s stall"


def test_an_out_of_date_benchmark_releases_and_stops_with_one_line(world, monkeypatch):
    class Newer(ArithBenchmark):
        @property
        def version(self) -> int:
            return super().version - 1  # this runner is older than the server's tasks

    mock_evaluator(monkeypatch, benchmark_loader=lambda name, context: Newer(context))
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    stopped = start(world, alice)
    assert stopped.exit_code == 1
    assert last_line(stopped).startswith("error: the task needs arith v")
    assert last_line(stopped).endswith("this runner's quorumbench is out of date, upgrade it")
    assert world.leases() == [("RELEASED", None)]


def test_a_runner_whose_protocol_is_no_longer_accepted_stops_with_one_line(
    world, home, monkeypatch
):
    """The server moved to protocol 2.0: a 1.x runner's first pull is refused (426), and
    the runner prints why and how to upgrade, and exits 1 instead of retrying."""
    runner_version = protocol.PROTOCOL_VERSION
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    monkeypatch.setattr(protocol, "PROTOCOL_VERSION", "2.0")  # the server's, read per call
    monkeypatch.setattr(protocol, "ACCEPTED_MAJORS", frozenset({2}))
    command = [str(Path(sys.executable).parent / "quorumbench"), "runner", "start"]
    stopped = subprocess.run(
        [*command, "--server", world.url, "--name", "box", "--no-sandbox"],  # not --once
        env={**os.environ, "QB_RUNNER_TOKEN": alice, "XDG_CONFIG_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stopped.returncode == 1, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert lines[-1] == (
        f"error: this server accepts runner protocol 2.0; this runner speaks {runner_version}: "
        "upgrade "
        "quorumbench on the runner (pip install -U quorumbench)"
    )
    assert world.leases() == [], "nothing was leased"
    answer = httpx.post(
        f"{world.url}/v0/leases",
        json={"runner": "box", "protocol_version": "1.0"},
        headers={"Authorization": f"Bearer {alice}"},
    )
    assert answer.status_code == 426
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["upgrade"] == "quorumbench-runner/2.0"
    problem = answer.json()
    assert problem["type"] == "/problems/unsupported-protocol"
    assert (problem["protocol_version"], problem["accepted_versions"]) == ("1.0", "2.0")


def test_a_model_that_does_not_load_is_still_the_tasks_failure(world):
    def broken(ref: str, options: Any) -> Any:
        raise ModelLoadError("weights are corrupt")

    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    with runner_for(world, alice, backend_loader=broken) as runner:
        outcome = runner.run_once()
    assert not outcome.ends_runner
    assert world.leases() == [("FAILED", "weights are corrupt")]


@pytest.mark.data
def test_missing_data_is_released_and_qb_datasets_dir_is_read(
    tmp_path, home, monkeypatch, datasets_dir
):
    mock_evaluator(monkeypatch)
    world = make_world(tmp_path, ["gsm8k"], datasets_dir)
    try:
        alice = world.token("alice")
        assert init(world, alice).exit_code == 0
        empty = tmp_path / "empty"
        empty.mkdir()
        stopped = start(world, alice, env={"QB_RUNNER_DATASETS_DIR": str(empty)})
        assert stopped.exit_code == 1, stopped.output
        line = last_line(stopped)
        assert line.startswith("error: data file not found: ")
        assert f"this runner reads benchmark data from {empty}; point --datasets-dir or " in line
        assert "QB_RUNNER_DATASETS_DIR" in line
        assert world.leases() == [("RELEASED", None)], "released, not failed"

        # the volunteer's setting: QB_DATASETS_DIR, which the runner now reads too
        done = start(world, alice, env={"QB_DATASETS_DIR": str(datasets_dir)})
        assert done.exit_code == 0, done.output
        assert world.leases() == [("RELEASED", None), ("SUBMITTED", None)]
    finally:
        world.server.stop()


# --- the server URL --------------------------------------------------------------------


@pytest.mark.parametrize("command", ["init", "start"])
def test_a_server_url_without_a_scheme_or_with_v0_is_refused_at_once(home, command):
    began = time.monotonic()
    bare = cli_run("runner", command, "--server", "127.0.0.1:18800", token="qb_x")
    assert bare.exit_code == 1
    assert len(bare.output.strip().splitlines()) == 1
    assert "write it as http://127.0.0.1:18800 (or https://…)" in bare.output
    v0 = cli_run("runner", command, "--server", "http://127.0.0.1:18800/v0", token="qb_x")
    assert v0.exit_code == 1
    assert "drop /v0: the server URL is its root (http://127.0.0.1:18800)" in v0.output
    assert time.monotonic() - began < 5, "no retries"


@pytest.mark.parametrize("command", ["init", "start"])
def test_a_server_never_reached_fails_fast(home, command):
    url = f"http://127.0.0.1:{free_port()}"
    extra = ["--no-sandbox"] if command == "start" else []
    began = time.monotonic()
    result = cli_run("runner", command, "--server", url, *extra, token="qb_x")
    assert result.exit_code == 1
    assert last_line(result).startswith(f"error: cannot reach {url} (ConnectError")
    assert "retrying" not in result.output
    assert time.monotonic() - began < 5


def test_after_the_first_contact_a_restarting_server_is_ridden_out(world):
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    port = int(world.url.rsplit(":", 1)[1])
    with runner_for(world, alice) as runner:
        world.server.stop()
        restarted: list[EmbeddedServer] = []

        def restart() -> None:
            time.sleep(1.0)
            server = EmbeddedServer(create_app(world.settings, run_scheduler=False), port=port)
            server.start()
            restarted.append(server)

        thread = threading.Thread(target=restart)
        thread.start()
        try:
            outcome = runner.run_once()
        finally:
            thread.join()
            if restarted:
                world.server = restarted[0]
    assert outcome.status == "submitted", outcome


def test_an_unreachable_server_after_the_first_contact_is_retried_before_giving_up(world):
    alice = world.token("alice")
    assert init(world, alice).exit_code == 0
    with runner_for(world, alice) as runner:
        world.server.stop()
        waits: list[float] = []
        runner.client._sleep = waits.append  # no real waiting
        with pytest.raises(ServerUnavailableError, match="after 5 attempts"):
            runner.client.pull()
    assert len(waits) == 4


def test_paths_and_messages_print_as_they_are(world, tmp_path):
    """Rich markup in a user's path is printed, not interpreted."""
    alice = world.token("alice")
    odd = tmp_path / "[bold]keys" / "[red]box.key"
    made = init(world, alice, "box", "--key-file", str(odd))
    assert made.exit_code == 0, made.output
    assert "[bold]keys/[red]box.key" in made.output.replace("\n", "")
