"""What the command line prints: data shown as it is (brackets are not rich markup) and
whole lines in a file or a pipe (no wrapping at 80 columns); export-site's target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quorumbench.backends.mock import MockBackend
from quorumbench.cli import _benchmarks, _eval
from quorumbench.cli._console import make_console
from quorumbench.cli.app import app
from quorumbench.evaluation.backend import ModelInfo
from quorumbench.evaluation.registry import PluginStatus

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "custom"
PATTERN = "'^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$'"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real command in a child process, its stdout and stderr pipes."""
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "quorumbench.cli.app", *args],
        capture_output=True,
        text=True,
        env={**environ, **env},
        timeout=120,
        check=False,
    )


def test_a_path_with_brackets_is_printed_as_given():
    result = run("eval", "--model", "hf:/tmp/[bold]x")
    assert result.exit_code == 1
    assert "error: model directory not found: /tmp/[bold]x\n" in result.output


def test_a_spec_pattern_keeps_its_brackets(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text((FIXTURES / "sums.yaml").read_text().replace("small-sums", "Small_Sums"))
    (tmp_path / "sums.json").write_bytes((FIXTURES / "sums.json").read_bytes())
    result = run("benchmark", "validate", str(spec))
    assert result.exit_code == 1
    assert f"name: String should match pattern {PATTERN}" in result.output


def test_a_yaml_error_keeps_its_brackets(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nnot: [valid\n")
    result = run("benchmark", "validate", str(spec))
    assert result.exit_code == 1
    assert f"error: {spec}: not valid YAML" in result.output
    assert "    not: [valid\n" in result.output and "expected ',' or ']'" in result.output
    assert "Traceback" not in result.output


def test_brackets_survive_a_real_process_and_its_pipes(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nnot: [valid\n")
    proc = cli("benchmark", "validate", str(spec))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "not: [valid" in proc.stderr and "[/" not in proc.stderr
    proc = cli("eval", "--model", "hf:/tmp/[bold]x[/bold]:smile:")
    assert proc.stderr == "error: model directory not found: /tmp/[bold]x[/bold]:smile:\n"


def test_a_spec_that_is_not_text_is_one_line(tmp_path):
    spec = tmp_path / "binary.yaml"
    spec.write_bytes(b"\xff\xfe\x00name")
    result = run("benchmark", "validate", str(spec))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output == f"error: {spec}: not UTF-8 text (byte 0)\n"


def test_eval_output_shows_refs_outputs_and_paths_as_they_are(tmp_path, monkeypatch):
    backend = MockBackend(lambda _: "[red]#### 7[/red] :smile: [b]", is_chat=False)
    backend._info = ModelInfo("hf:/models/[bold]tuned", "mock", "0" * 64, False)
    monkeypatch.setattr(_eval, "load_backend", lambda ref, options: backend)
    folder = tmp_path / ("[bold]" + "d" * 150)
    folder.mkdir()
    out = folder / "result.json"
    result = run(
        "eval", "-m", "hf:/models/[bold]tuned", "-n", "2", "--json", str(out), "--show-samples"
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("│ hf:/models/[bold]tuned " in line for line in lines)
    assert sum("[red]#### 7[/red] :smile: [b]" in line for line in lines) == 2
    digest = json.loads(out.read_text())["outputs_sha256"]
    assert any(digest in line for line in lines)  # the hash on one line, in one piece
    assert f"wrote {out}" in lines


def test_plugin_load_errors_keep_their_brackets(monkeypatch):
    class Broken:
        def status(self):
            return [
                PluginStatus(
                    "fancy", "fancy_pkg.bench:Fancy", "entry point", "needs fancy[extra]: [red]"
                )
            ]

    monkeypatch.setattr(_benchmarks, "benchmark_registry", Broken)
    monkeypatch.setattr(_benchmarks, "backend_registry", Broken)
    plugins = run("plugins", "list")
    assert plugins.exit_code == 0
    assert plugins.output.count("error: needs fancy[extra]: [red]") == 2
    listed = run("benchmark", "list")
    assert "failed to load: needs fancy[extra]: [red]" in listed.output


def test_a_long_error_is_one_line_in_a_pipe(tmp_path):
    long_dir = "/tmp/" + "/".join(["a-rather-long-folder-name"] * 8) + "/[x]model"
    assert len(long_dir) > 200
    proc = cli("eval", "--model", f"hf:{long_dir}")
    assert proc.returncode == 1
    assert proc.stderr == f"error: model directory not found: {long_dir}\n"


def test_a_long_line_is_whole_in_a_pipe_and_columns_still_counts(tmp_path):
    folder = tmp_path / ("x" * 180)
    folder.mkdir()
    spec = folder / "sums.yaml"
    spec.write_bytes((FIXTURES / "sums.yaml").read_bytes())  # no data: an error naming it
    proc = cli("benchmark", "validate", str(spec))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and str(folder / "sums.json") in proc.stderr
    listed = cli("plugins", "list")
    lines = listed.stdout.splitlines()
    assert listed.returncode == 0 and all(line == line.rstrip() for line in lines)
    widest = max(len(line) for line in lines)
    narrow = cli("plugins", "list", COLUMNS="60")
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60 < widest


def test_a_terminal_still_wraps():
    import io

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    console = make_console()
    console.file = Tty()
    console.size = (40, 25)
    console.print("word " * 20)
    assert max(len(line) for line in console.file.getvalue().splitlines()) <= 40
    piped = make_console()
    piped.file = io.StringIO()
    piped.print("word " * 40)
    piped.rule("title")
    lines = piped.file.getvalue().splitlines()
    assert lines[0] == ("word " * 40).rstrip() and len(lines[1]) == 80


@pytest.fixture
def database(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'qb.db'}"
    assert run("db", "upgrade", "--database-url", url, "--create").exit_code == 0
    return url


def test_export_site_onto_a_file_is_one_line(tmp_path, database):
    target = tmp_path / "site.html"
    target.write_text("mine")
    result = run("export-site", str(target), "--database-url", database)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output == (
        f"error: {target} exists and is not a directory: give a new or empty directory for "
        "the site\n"
    )
    assert target.read_text() == "mine"
    below = run("export-site", str(target / "site"), "--database-url", database)
    assert below.exit_code == 1 and "Traceback" not in below.output
    assert below.output.startswith(f"error: cannot write the site to {target / 'site'}: ")


def test_export_site_refuses_a_folder_of_other_things_unless_forced(tmp_path, database):
    folder = tmp_path / "public"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    (folder / "index.html").write_text("my own page")
    refused = run("export-site", str(folder), "--database-url", database)
    assert refused.exit_code == 1
    assert "is not empty and holds no earlier export" in refused.output
    assert "--force" in refused.output
    assert (folder / "index.html").read_text() == "my own page"
    forced = run("export-site", str(folder), "--database-url", database, "--force")
    assert forced.exit_code == 0, forced.output
    assert (folder / "notes.txt").read_text() == "keep me"  # nothing unrelated removed
    assert (folder / "leaderboard.json").is_file()
    again = run("export-site", str(folder), "--database-url", database)  # an earlier export
    assert again.exit_code == 0, again.output
    empty = tmp_path / "empty"
    empty.mkdir()
    written = run("export-site", str(empty), "--database-url", database)
    assert written.exit_code == 0 and f"open {empty / 'index.html'}" in written.output


def test_a_json_target_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    backend = MockBackend(lambda _: "#### 1", is_chat=False)
    monkeypatch.setattr(_eval, "load_backend", lambda ref, options: backend)

    def full(path, result):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_eval, "write_json", full)
    out = tmp_path / "r.json"
    result = run("eval", "-n", "1", "--json", str(out))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: --json {out}: cannot write it: No space left on device" in result.output
