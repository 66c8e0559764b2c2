"""``quorumbench eval`` on a code benchmark: the programs run in a sandbox, or the
command refuses in one line; ``--no-sandbox`` runs them without one."""

from __future__ import annotations

import json
import os
import shutil
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from quorumbench.cli.app import app

REV = "0" * 40
# HumanEval/2 (truncate_number): the right body for that problem, wrong for others
ANSWER = quote("    return number % 1.0\n", safe="")
runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


@pytest.fixture
def bwrap():
    if shutil.which("bwrap") is None:  # the refusal below is tested everywhere
        if os.environ.get("QB_REQUIRE_ALL") == "1":
            pytest.fail("QB_REQUIRE_ALL=1 but bwrap is not installed")
        pytest.skip("bwrap is not installed")


def test_eval_runs_the_programs_in_a_sandbox(humaneval_package, bwrap, tmp_path):
    out = tmp_path / "result.json"
    result = run(
        "eval", "-b", "humaneval", "-m", f"mock:say/{ANSWER}@{REV}", "-n", "3", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["benchmark"]["name"] == "humaneval" and len(saved["samples"]) == 3
    assert [s["prediction"] for s in saved["samples"]] == ["    return number % 1.0"] * 3
    assert {s["score"] for s in saved["samples"]} <= {0.0, 1.0}


def test_without_a_sandbox_eval_refuses_in_one_line(humaneval_package, monkeypatch):
    monkeypatch.setattr("quorumbench.runner.sandbox.shutil.which", lambda name: None)
    result = run("eval", "-b", "humaneval", "-m", f"mock:empty@{REV}", "-n", "1")
    assert result.exit_code == 1
    line = " ".join(result.output.split())
    assert line.startswith("error: no sandbox for the programs humaneval generates and runs")
    assert "pass --no-sandbox" in line and "Traceback" not in result.output


def test_no_sandbox_runs_them_in_plain_subprocesses(humaneval_package, monkeypatch):
    monkeypatch.setattr("quorumbench.runner.sandbox.shutil.which", lambda name: None)
    result = run(
        "eval", "-b", "humaneval", "-m", f"mock:say/{ANSWER}@{REV}", "-n", "1", "--no-sandbox"
    )
    assert result.exit_code == 0, result.output


def test_a_benchmark_that_runs_no_code_needs_no_sandbox(monkeypatch):
    monkeypatch.setattr("quorumbench.runner.sandbox.shutil.which", lambda name: None)
    assert run("eval", "-b", "arith", "-m", f"mock:empty@{REV}", "-n", "1").exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sandbox", "docker"], "'docker': use auto, bwrap or unshare (or --no-sandbox)"),
        (["--sandbox", "bwrap", "--no-sandbox"], "use --sandbox or --no-sandbox, not both"),
    ],
)
def test_bad_sandbox_flags(args, message):
    result = run("eval", "-b", "humaneval", *args)
    assert result.exit_code != 0 and message in " ".join(result.output.split())
