"""The command line, in process (CliRunner) for errors and as a subprocess for the main job."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quorumbench.benchmarks import load_benchmark
from quorumbench.cli.app import app
from quorumbench.errors import ConfigError
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "custom"
runner = CliRunner()


def run(*args, env=None):
    return runner.invoke(app, list(args), env=env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "-b", "nope"], "error: unknown benchmark 'nope'; known: arc-challenge, arith"),
        (["eval", "-m", "hf:org/model"], "a Hub ref must be pinned to a 40-hex commit"),
        (["eval", "-m", "gpt4"], "expected one of hf:, gguf:, openai:, bundled:"),
        (
            ["eval", "-b", "gsm8k", "--datasets-dir", "/nonexistent"],
            "error: datasets directory not found",
        ),
        (["eval", "--json", "/nonexistent/dir/out.json"], "does not exist"),
        (["eval", "--prompt-style", "fancy"], "use auto, chat or plain"),
        (["eval", "--engine", "vllm"], "use transformers, llamacpp or auto"),
        (
            ["eval", "-m", "openai:https://api.example.com/v1#m", "--engine", "llamacpp"],
            "error: --engine llamacpp runs GGUF files (gguf: and bundled: refs) and LoRA "
            "adapters on them (hf:), not openai:",
        ),
        (["eval", "-n", "0"], "Error: Invalid value for '--samples' / '-n'"),
        (["benchmark", "validate", "/nonexistent.yaml"], "benchmark spec not found"),
    ],
)
def test_bad_input_gives_one_clear_line(args, message):
    result = run(*args)
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_missing_data_file(tmp_path):
    result = run("eval", "-b", "truthfulqa-mc1", "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "error: data file not found" in result.output


@pytest.mark.data
def test_checksum_mismatch(tmp_path, datasets_dir):
    target = tmp_path / "truthfulqa" / "TruthfulQA.csv"
    target.parent.mkdir()
    target.write_bytes((datasets_dir / "truthfulqa" / "TruthfulQA.csv").read_bytes() + b"\n")
    result = run("eval", "-b", "truthfulqa-mc1", "--datasets-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "error: checksum mismatch" in result.output


def test_the_cli_names_its_flag_for_the_engines_hint():
    """The engine's error names the setting; each command adds its own flag."""
    spec = str(FIXTURES / "capitals.yaml")  # 4 samples
    sampled = run("benchmark", "sample", spec, "-n", "10")
    assert sampled.exit_code == 1
    line = " ".join(sampled.output.split())
    assert (
        "error: world-capitals has 4 samples; cannot draw 10; draw fewer samples (--samples)"
        in (line)
    )
    with pytest.raises(ConfigError) as info:  # the same error, raised by the engine
        select_samples(load_benchmark(spec, BenchmarkContext()), 10, "0")
    assert info.value.message.endswith("cannot draw 10; draw fewer samples")
    assert info.value.hint is not None and info.value.hint.setting == "samples"


def test_data_the_hub_cannot_give_names_the_datasets_flag(monkeypatch, tmp_path):
    import huggingface_hub

    from quorumbench.settings import get_settings

    def offline(*args, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.delenv("QB_DATASETS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    get_settings.cache_clear()
    try:
        result = run("benchmark", "sample", "truthfulqa-mc1", "-n", "1")
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    line = " ".join(result.output.split())
    assert line.startswith("error: cannot download truthfulqa/truthful_qa")
    assert line.endswith(
        "from the Hub (OSError); offline, give a datasets directory that holds a local copy "
        "(--datasets-dir or QB_DATASETS_DIR)"
    )


def test_only_a_flag_the_command_has_is_named():
    from typing import Annotated

    import typer

    from quorumbench.cli._hints import error_message, option_flag
    from quorumbench.errors import Hint

    def command(
        n: Annotated[int, typer.Option("-n", "--samples")] = 1,
        batch_size: Annotated[int, typer.Option()] = 8,
        trace: Annotated[bool, typer.Option("--trace/--no-trace")] = False,
    ) -> None: ...

    assert option_flag(command, "n") == "--samples"
    assert option_flag(command, "batch_size") == "--batch-size"
    assert option_flag(command, "trace") == "--trace"
    assert option_flag(command, "device") is None
    error = ConfigError("too big", hint=Hint("batch_size", "make it smaller"))
    assert error_message(error, command) == "too big; make it smaller (--batch-size)"
    other = ConfigError("no GPU", hint=Hint("device", "choose the cpu device"))
    assert error_message(other, command) == "no GPU; choose the cpu device"
    assert error_message(ConfigError("plain"), command) == "plain"


def test_pickled_weights_name_the_flag_that_allows_them(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really a pickle")
    result = run("eval", "-m", f"hf:{tmp_path}", "-n", "1")
    assert result.exit_code == 1
    line = " ".join(result.output.split())
    assert "which can run code when loaded; convert them to safetensors, or allow pickled" in line
    assert line.endswith("if you trust them (--allow-pickle)")


def test_debug_shows_the_traceback():
    result = run("--debug", "eval", "-b", "nope")
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "UnknownBenchmarkError"


def test_benchmark_validate_ok():
    result = run("benchmark", "validate", str(FIXTURES / "capitals.yaml"))
    assert result.exit_code == 0, result.output
    assert "ok world-capitals v1 (multiple-choice): 4 samples" in result.output


def test_benchmark_validate_reports_the_problem(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text((FIXTURES / "sums.yaml").read_text().replace("version: 2", "version: zero"))
    result = run("benchmark", "validate", str(spec))
    assert result.exit_code == 1
    assert "version: Input should be a valid integer" in " ".join(result.output.split())


def test_benchmark_sample_prints_the_ids():
    result = run("benchmark", "sample", "arith", "--seed", "epoch-1", "-n", "3")
    assert result.exit_code == 0
    from quorumbench.benchmarks.arith import ArithBenchmark
    from quorumbench.evaluation.benchmark import BenchmarkContext
    from quorumbench.evaluation.engine import select_samples

    expected = [s.id for s in select_samples(ArithBenchmark(BenchmarkContext()), 3, "epoch-1")]
    assert result.output.split() == expected


def test_benchmark_and_plugin_lists():
    listed = run("benchmark", "list")
    assert listed.exit_code == 0
    for name in ("arith", "gsm8k", "truthfulqa-mc1", "truthfulqa-mc2"):
        assert name in listed.output
    plugins = run("plugins", "list")
    assert plugins.exit_code == 0
    assert "openai-compat" in plugins.output


@pytest.mark.model
@pytest.mark.slow
def test_main_job_end_to_end(tmp_path, smollm2_dir, model_cache_dir):
    """`quorumbench eval` as a user runs it: bundled model, arith, JSON written; the file
    runs on llama.cpp, as runners evaluate it for the board (``--engine auto``)."""
    out = tmp_path / "result.json"
    env = {**os.environ, "QB_CACHE_DIR": str(model_cache_dir), "QB_OPENAI_API_KEY": "sk-secret-123"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "quorumbench.cli.app",
            "eval",
            "-n",
            "2",
            "--json",
            str(out),
            "--max-new-tokens",
            "48",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "QuorumBench evaluation" in proc.stdout
    assert "sk-secret-123" not in proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"]["name"] == "arith"
    assert doc["n"] == 2 and len(doc["samples"]) == 2
    assert doc["model"]["backend"] == "llamacpp"
    assert len(doc["outputs_sha256"]) == 64
    assert "sk-secret-123" not in out.read_text()
