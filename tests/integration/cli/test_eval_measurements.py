"""``quorumbench eval`` prints the run's measurements, each with how it was taken, and
writes them in ``--json`` (docs/efficiency.md)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from quorumbench.backends.mock import MockBackend
from quorumbench.cli import _eval
from quorumbench.cli.app import app
from quorumbench.settings import get_settings

runner = CliRunner()


@pytest.fixture
def mock(monkeypatch):
    backend = MockBackend(lambda _: "#### 3", is_chat=False)
    monkeypatch.setattr(_eval, "load_backend", lambda ref, options: backend)
    get_settings.cache_clear()
    yield backend
    get_settings.cache_clear()


def rows(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 2:
            found[cells[0]] = cells[1]
    return found


def test_eval_prints_and_writes_the_measurements(mock, monkeypatch, tmp_path):
    monkeypatch.setenv("QB_CARBON_INTENSITY", "GB")
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", "-n", "2", "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = rows(result.output)
    measured = json.loads(out.read_text())["measurements"]
    method = measured["energy_method"]
    assert method in ("rapl", "estimate")
    assert shown["energy"].endswith(f"({method}, {measured['energy_scope']})")
    assert shown["CO₂"].endswith("(216.5 g/kWh, country:GB)")
    assert measured["carbon_intensity_source"] == "country:GB"
    # the mock times nothing: said, not guessed
    assert shown["time to first token"] == "not measured"
    assert shown["decode"] == "not measured"
    assert shown["peak GPU memory"] == "not measured"
    assert shown["peak memory"].endswith("MiB")
    assert "ttft_s" not in measured
    assert measured["generated_tokens"] == json.loads(out.read_text())["tokens"] > 0


def test_a_bad_carbon_intensity_is_one_line(mock, monkeypatch):
    monkeypatch.setenv("QB_CARBON_INTENSITY", "lots")
    result = runner.invoke(app, ["eval", "-n", "1"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "invalid settings: carbon_intensity: unknown carbon intensity setting 'lots'" in (
        result.output
    )
