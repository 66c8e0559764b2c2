"""``quorumbench ask`` end to end: a real server (uvicorn in a thread, its context built
at start as ``serve`` builds it), a real OpenAI-compatible endpoint on loopback that
checks its key, the command line in process (CliRunner) and once as a subprocess.

After the runs the KEY GREP: the endpoint's key is in no file of the server's data
directory, not in a SQL dump of its database, not in the logs (every logger, at
DEBUG) and not in anything the command printed.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from integration.server.conftest import MATH_ONLY, sums_spec
from integration.server.endpoint_server import serve_endpoint
from integration.server.test_asks_live import KEY, PLAN
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.settings import ServerSettings

__all__ = ["sums_spec"]  # a fixture
runner = CliRunner()


@pytest.fixture
def world(tmp_path, sums_spec):
    data = tmp_path / "data"
    settings = ServerSettings(
        data_dir=data,
        benchmarks=[sums_spec],
        pillars={"sums": "math"},
        pillar_weights=MATH_ONLY,
        ask_allow_private_endpoints=True,
        ask_workers=1,
    )
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN), encoding="utf-8")
    with EmbeddedServer(create_app(settings, run_scheduler=False)) as server:
        ctx = server.context
        create_account(ctx, "alice")
        token = issue_token(ctx, "alice").token
        yield {"url": server.url, "token": token, "plan": plan, "data": data, "ctx": ctx}


def cli(world, *args, token=True, **env):
    base = {
        "QB_TOKEN": world["token"] if token else None,
        "XDG_CONFIG_HOME": str(world["data"].parent / "config"),  # no saved sessions
        "COLUMNS": "200",
        **env,
    }
    return runner.invoke(app, [*args, "--server", world["url"]], env=base)


def test_ask_prints_the_plan_and_the_board_and_keeps_no_key(world, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    printed = []
    with serve_endpoint(KEY) as endpoint:
        # a plan, no endpoint, no credential: the cache's answer at once
        plain = cli(world, "ask", "--plan", str(world["plan"]), "--json", token=False)
        printed.append(plain.output)
        assert plain.exit_code == 0, plain.output
        answer = json.loads(plain.output)
        assert answer["ask"]["status"] == "SUCCESS" and answer["board"]["endpoints"] == []
        # an endpoint, its key from the environment, waiting with a progress bar
        target = f"{endpoint.url}#mine"
        shown = cli(
            world,
            *("ask", "--plan", str(world["plan"]), "--endpoint", target),
            *("--api-key-env", "MY_ENDPOINT_KEY", "--wait"),
            MY_ENDPOINT_KEY=KEY,
        )
        printed.append(shown.output)
        assert shown.exit_code == 0, shown.output
        assert "plan " in shown.output and "budget: 20" in shown.output
        assert "not cross-checked" in shown.output and "0.050 [" in shown.output
        assert "sums 20" in shown.output
        # the same with --json, as a person runs it (a subprocess)
        done = subprocess.run(
            [
                *(sys.executable, "-m", "quorumbench.cli.app", "ask", "--plan", str(world["plan"])),
                *("--endpoint", target, "--api-key-env", "MY_ENDPOINT_KEY", "--wait", "--json"),
                *("--server", world["url"]),
            ],
            env={**os.environ, "QB_TOKEN": world["token"], "MY_ENDPOINT_KEY": KEY},
            capture_output=True,
            text=True,
            timeout=300,
        )
        printed.extend([done.stdout, done.stderr])
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["ask"]["status"] == "SUCCESS"
        assert answer["ask"]["progress_done"] == answer["ask"]["progress_total"] == 20
        [row] = answer["board"]["endpoints"]
        assert row["n_samples"] == 20 and row["cross_checked"] is False
        assert all(ok for _, ok in endpoint.seen)  # the endpoint got its key every time
    # the KEY GREP
    ctx = world["ctx"]
    ctx.db.dispose()
    found = [
        str(p) for p in world["data"].rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()
    ]
    database = next(world["data"].glob("*.db"))
    with sqlite3.connect(database) as conn:
        dump = "\n".join(conn.iterdump())
    assert "INSERT INTO asks" in dump or 'INSERT INTO "asks"' in dump  # the dump has the asks
    assert not found
    assert KEY not in dump
    assert KEY not in caplog.text
    assert not any(KEY in text for text in printed)


def test_ask_errors_are_one_line(world, monkeypatch):
    nothing = cli(world, "ask")
    assert nothing.exit_code == 1 and "give a QUERY" in nothing.output
    bad = cli(world, "ask", "--plan", str(world["plan"]), "--endpoint", "http://x/v1")
    assert bad.exit_code == 1 and "URL#MODEL" in bad.output
    unset = cli(
        world,
        *("ask", "--plan", str(world["plan"]), "--endpoint", "http://x/v1#m"),
        *("--api-key-env", "NO_SUCH_VARIABLE_HERE"),
    )
    assert unset.exit_code == 1 and "NO_SUCH_VARIABLE_HERE" in unset.output
    anonymous = cli(
        world,
        "ask",
        "--plan",
        str(world["plan"]),
        "--endpoint",
        "http://127.0.0.1:9/v1#m",
        token=False,
    )
    assert anonymous.exit_code == 1
    assert len(anonymous.output.strip().splitlines()) == 1
    world["plan"].write_text("budget: 0\n", encoding="utf-8")
    refused = cli(world, "ask", "--plan", str(world["plan"]))
    assert refused.exit_code == 1 and "budget must be" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_ask_a_query_prints_what_each_word_matched(world):
    shown = cli(world, "ask", "math questions for my xyzzy", token=False)
    assert shown.exit_code == 0, shown.output
    assert "'math' → subject: science/math" in shown.output
    assert "unmapped: " in shown.output and "xyzzy" in shown.output
    assert "no verified results match this plan yet" in shown.output
    as_json = cli(world, "ask", "math", "--json", token=False)
    assert json.loads(as_json.output)["ask"]["report"]["planner"].startswith("offline/")
