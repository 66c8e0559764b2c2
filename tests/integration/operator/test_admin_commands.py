"""Admin commands on the server machine, as an operator follows the README.

They read the same settings as ``serve``, name the database they changed, never
change what a running server schedules, and never make a database unless asked.
"""

from __future__ import annotations

import os

import httpx
import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from quorumbench.cli.app import app as cli_app
from quorumbench.db.engine import connect
from quorumbench.db.migrate import downgrade, head_revision

from ..pg import throwaway_database, url_for
from .harness import Served, free_port, run_cli

cli = CliRunner()


def one_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_admin_commands_refuse_to_make_a_database_unless_asked(tmp_path):
    data = tmp_path / "nothing-here"
    line = one_line(cli.invoke(cli_app, ["account", "create", "alice", "--data-dir", str(data)]))
    assert f"there is no QuorumBench database at {data / 'quorumbench.db'}" in line
    assert "--create" in line and "QB_DATABASE_URL" in line
    assert not data.exists()
    for args in (["token", "issue", "alice"], ["db", "upgrade"]):
        assert "no QuorumBench database" in one_line(
            cli.invoke(cli_app, [*args, "--data-dir", str(data)])
        )
    assert not data.exists()


def test_create_makes_the_database_and_every_answer_names_it(tmp_path):
    data = tmp_path / "qb"
    made = cli.invoke(cli_app, ["account", "create", "alice", "--data-dir", str(data), "--create"])
    assert made.exit_code == 0, made.output
    where = f"sqlite:///{data / 'quorumbench.db'}"
    assert f"created account 'alice' (id 1) in {where}" in " ".join(made.output.split())
    issued = cli.invoke(cli_app, ["token", "issue", "alice", "--data-dir", str(data)])
    assert issued.exit_code == 0, issued.output
    assert f"in {where}" in " ".join(issued.output.split())
    assert issued.output.strip().splitlines()[-1].startswith("qb_")
    # no log key, no benchmark rows: those are the server's to make
    assert not (data / "log-signing-key.pem").exists()
    engine = create_engine(where)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM benchmarks")).scalar() == 0
    engine.dispose()


def test_the_default_data_dir_follows_xdg_data_home(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "QB_DATA_DIR": "", "QB_DATABASE_URL": ""}
    env = {k: v for k, v in env.items() if v}
    made = cli.invoke(cli_app, ["account", "create", "bob", "--create"], env=env)
    assert made.exit_code == 0, made.output
    assert (tmp_path / "xdg" / "quorumbench" / "quorumbench.db").exists()


@pytest.mark.postgres
def test_a_missing_postgres_database_is_one_line_for_admin_commands_and_serve():
    url = url_for("qb_no_such_database")
    line = one_line(cli.invoke(cli_app, ["account", "create", "alice", "--database-url", url]))
    assert "cannot use the database postgresql+psycopg://postgres@127.0.0.1:5432/" in line
    assert 'database "qb_no_such_database" does not exist' in line
    served = run_cli("serve", "--port", str(free_port()), "--database-url", url)
    assert served.returncode == 1 and "Traceback" not in served.stderr
    assert 'database "qb_no_such_database" does not exist' in served.stderr
    assert served.stderr.strip().count("\n") == 0, served.stderr


def test_admin_commands_refuse_an_outdated_schema_until_db_upgrade(tmp_path):
    data = tmp_path / "old"
    assert (
        cli.invoke(cli_app, ["db", "upgrade", "--data-dir", str(data), "--create"]).exit_code == 0
    )
    db = connect(f"sqlite:///{data / 'quorumbench.db'}")
    downgrade(db, "0008")
    db.dispose()
    line = one_line(cli.invoke(cli_app, ["account", "create", "carol", "--data-dir", str(data)]))
    assert f"needs {head_revision()}: run `quorumbench db upgrade`" in line
    upgraded = cli.invoke(cli_app, ["db", "upgrade", "--data-dir", str(data)])
    assert upgraded.exit_code == 0
    assert f"schema 0008 -> {head_revision()}" in upgraded.output
    made = cli.invoke(cli_app, ["account", "create", "carol", "--data-dir", str(data)])
    assert made.exit_code == 0, made.output


def test_a_schema_from_a_newer_quorumbench_is_refused_in_one_line(tmp_path):
    data = tmp_path / "newer"
    assert (
        cli.invoke(cli_app, ["db", "upgrade", "--data-dir", str(data), "--create"]).exit_code == 0
    )
    engine = create_engine(f"sqlite:///{data / 'quorumbench.db'}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    engine.dispose()
    line = one_line(cli.invoke(cli_app, ["account", "create", "dave", "--data-dir", str(data)]))
    assert "schema revision 0999" in line and "upgrade quorumbench" in line


def test_serve_on_a_port_in_use_says_so_before_announcing_anything(tmp_path):
    with Served(tmp_path, "--data-dir", str(tmp_path / "a")) as first:
        second = run_cli("serve", "--port", str(first.port), "--data-dir", str(tmp_path / "b"))
    assert second.returncode == 1
    assert f"port {first.port} on 127.0.0.1 is in use" in second.stderr
    assert "server on" not in second.stdout and "Traceback" not in second.stderr
    assert not (tmp_path / "b").exists()  # nothing made before the port was ours


def _database(kind: str, tmp_path, request) -> list[str]:
    if kind == "sqlite":
        return ["--data-dir", str(tmp_path / "data")]
    name = request.getfixturevalue("pg_name")
    return ["--database-url", url_for(name), "--data-dir", str(tmp_path / "data")]


@pytest.fixture
def pg_name():
    with throwaway_database("qb_operator") as name:
        yield name


@pytest.mark.model
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_admin_commands_leave_a_running_server_alone(kind, tmp_path, request):
    """The README's order: serve, then accounts and tokens; runners still get work."""
    where = _database(kind, tmp_path, request)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QB_")}
    with Served(tmp_path, *where, env=env) as server:
        before = httpx.get(server.url + "/v0/benchmarks").json()
        assert before and all(b["active"] for b in before)

        def admin(*args: str) -> str:
            done = run_cli(*args, *where, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        admin("account", "create", "root", "--admin")
        for name in ("alice", "bob"):
            assert "created account" in admin("account", "create", name)
        root = admin("token", "issue", "root", "--scope", "admin").split()[-1]
        alice = admin("token", "issue", "alice").split()[-1]
        admin("token", "issue", "bob", "--scope", "task:pull", "--scope", "task:submit")
        admin("db", "upgrade")

        after = httpx.get(server.url + "/v0/benchmarks").json()
        assert after == before  # still active: admin commands never retire benchmarks
        registered = httpx.post(
            server.url + "/v0/models",
            json={"ref": "bundled:smollm2-135m-instruct"},
            headers={"Authorization": f"Bearer {root}"},
            timeout=120,
        )
        assert registered.status_code == 201, registered.text
        pulled = httpx.post(  # a runner of today: the bundled GGUF runs on llama.cpp
            server.url + "/v0/leases",
            json={"runner": "laptop", "protocol_version": "1.3", "engines": ["llamacpp"]},
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert pulled.status_code == 201, pulled.text
        assert pulled.json()["task"]["benchmark"]["name"] == "arith"
        board = run_cli("leaderboard", "-b", "arith", "--server", server.url, env=env)
        assert board.returncode == 0, board.stderr
        assert "no finalized tasks yet" in board.stdout
        health = httpx.get(server.url + "/v0/health").json()
        assert health["status"] == "ok" and health["checks"]["database"]["status"] == "ok"
        assert server.stop() == 0
    out, log = server.out_file.read_text(), server.log()
    assert f"server on {server.url}" in out
    for label in ("database", "queue", "data dir", "log key", "auth key", "benchmarks"):
        assert f"  {label} " in out, out
    assert "event=server.start" in log and "event=lease.granted" in log
    assert "event=server.stop" in log
