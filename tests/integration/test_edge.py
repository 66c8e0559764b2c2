"""The edge benchmark with the real SmolLM2-135M on this CPU, and ``quorumbench edge``
(docs/efficiency.md, "The edge benchmark")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quorumbench.cli import edge_cmd
from quorumbench.cli.app import app
from quorumbench.evaluation.edge import EdgeSettings, run_edge

runner = CliRunner()

SMALL = EdgeSettings(prompt_tokens=64, gen_tokens=16, warmup=1, min_runs=2, min_time_s=0.0)
SMALL_FLAGS = ["--prompt-tokens", "64", "--gen-tokens", "16", "--warmup", "1"]
SMALL_FLAGS += ["--min-runs", "2", "--min-time", "0"]


def model_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.safetensors"))


@pytest.mark.model
@pytest.mark.slow
def test_smollm2_on_this_cpu_gives_every_figure(smollm2_backend, smollm2_dir):
    result = run_edge(smollm2_backend, SMALL)
    assert len(result.runs) == 2 and len(result.warmup_runs) == 1
    for run in (*result.runs, *result.warmup_runs):
        assert run.generated_tokens == 16 and run.finish_reason == "length"
        assert run.prompt_tokens == 64  # the whole prompt is prefilled every run
    assert result.forced_length and result.notes == ()
    assert result.prefill_tokens_per_s is not None and result.prefill_tokens_per_s.mean > 0
    assert result.decode_tokens_per_s is not None and result.decode_tokens_per_s.mean > 0
    assert result.ttft_s is not None and result.ttft_s.n == 2
    assert result.ttft_s.mean < result.wall_s.mean
    assert result.peak_rss_bytes is not None and result.peak_rss_bytes > model_bytes(smollm2_dir)
    assert result.peak_gpu_bytes is None
    assert result.hardware_class.startswith("cpu:")
    assert result.hardware["cpu_count"] and "torch" in result.libraries


@pytest.mark.model
@pytest.mark.slow
def test_the_cli_prints_json_and_writes_the_file(smollm2_dir, tmp_path):
    out = tmp_path / "edge.json"
    args = ["edge", f"hf:{smollm2_dir}", *SMALL_FLAGS, "--device", "cpu", "--json"]
    result = runner.invoke(app, [*args, "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads(out.read_text())
    assert data["settings"] == {
        "prompt_tokens": 64,
        "gen_tokens": 16,
        "warmup": 1,
        "min_runs": 2,
        "min_time_s": 0.0,
        "max_runs": 50,
    }
    assert data["decode_tokens_per_s"]["n"] == 2 and data["decode_tokens_per_s"]["mean"] > 0
    assert [r["generated_tokens"] for r in data["runs"]] == [16, 16]
    assert data["forced_length"] is True and data["hardware_class"].startswith("cpu:")


@pytest.mark.model
@pytest.mark.slow
def test_the_cli_table_shows_mean_sd_runs_and_class(smollm2_dir):
    args = ["edge", f"hf:{smollm2_dir}", *SMALL_FLAGS, "--device", "cpu"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "decode tokens/s" in result.stdout and "±" in result.stdout
    assert "hardware class cpu:" in result.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--min-runs", "5", "--max-runs", "2"], "max_runs (2) must be at least min_runs (5)"),
        (["--prompt-tokens", "0"], "prompt_tokens must be at least 1"),
        (["--min-time", "-1"], "min_time_s must be between"),
    ],
)
def test_bad_options_are_one_line_before_any_model_loads(monkeypatch, flags, message):
    def no_load(ref, options):
        raise AssertionError("no model should load")

    monkeypatch.setattr(edge_cmd, "load_backend", no_load)
    result = runner.invoke(app, ["edge", "mock:x", *flags])
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_an_unparseable_option_is_typers_usage_error():
    result = runner.invoke(app, ["edge", "mock:x", "--gen-tokens", "many"])
    assert result.exit_code == 2
