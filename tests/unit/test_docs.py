"""The docs describe what exists: every command, benchmark, backend and setting."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from quorumbench.backends import registry as backend_registry
from quorumbench.benchmarks import registry as benchmark_registry
from quorumbench.settings import EvalSettings, QueueSettings, RunnerSettings, ServerSettings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_cli_reference_is_current(tmp_path):
    out = tmp_path / "cli.md"
    typer = Path(sys.executable).parent / "typer"
    if not typer.exists():
        pytest.skip("the typer command is not installed next to this Python")
    subprocess.run(
        [
            str(typer),
            "quorumbench.cli.app",
            "utils",
            "docs",
            "--name",
            "quorumbench",
            "--title",
            "Command-line reference",
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    assert out.read_text() == (DOCS / "cli.md").read_text(), "run `make docs`"


def test_every_benchmark_is_documented():
    text = (DOCS / "benchmarks.md").read_text()
    for name in benchmark_registry().names():
        assert f"`{name}`" in text, name


def test_every_backend_is_documented():
    text = (DOCS / "models.md").read_text()
    for name in backend_registry().names():
        assert f"`{name}`" in text, name


def test_every_setting_is_described_and_documented():
    readme = (ROOT / "README.md").read_text()
    for name, field in EvalSettings.model_fields.items():
        assert field.description, f"{name} has no description"
        assert f"`QB_{name.upper()}`" in readme, name


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in link:
            assert (ROOT / link).exists(), link


def test_every_server_setting_is_described_and_documented():
    text = (DOCS / "server.md").read_text()
    for name, field in ServerSettings.model_fields.items():
        assert field.description, f"{name} has no description"
        if name == "queue":
            for sub, subfield in QueueSettings.model_fields.items():
                assert subfield.description, f"queue.{sub} has no description"
                assert f"`QB_QUEUE__{sub.upper()}`" in text, f"queue.{sub}"
        else:
            assert f"`QB_{name.upper()}`" in text, name


def test_every_runner_setting_is_described_and_documented():
    text = (DOCS / "runner.md").read_text()
    for name, field in RunnerSettings.model_fields.items():
        assert field.description, f"{name} has no description"
        assert f"`QB_RUNNER_{name.upper()}`" in text, name
