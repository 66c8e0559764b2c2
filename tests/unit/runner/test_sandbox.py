"""What a sandbox shows and passes on, checked without starting one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from quorumbench.errors import ConfigError
from quorumbench.runner.sandbox import (
    Limits,
    Sandbox,
    layout,
    protected_paths,
    resolve_sandbox,
    worker_env,
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "models" / "m").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def test_a_model_path_that_shows_a_secret_is_refused(home, tmp_path):
    protected = protected_paths((tmp_path / "keys" / "r.key",))
    assert layout((home / "models" / "m",), protected=protected).readable
    for path in (home, home / ".ssh", tmp_path, tmp_path / "keys", Path("/")):
        with pytest.raises(ConfigError, match="refusing to show"):
            layout((path,), protected=protected)


def test_the_layout_shows_python_and_the_model_read_only(home):
    where = layout((home / "models" / "m",), protected=protected_paths())
    assert home / "models" / "m" in where.readable
    assert any(Path(sys.prefix).is_relative_to(p) for p in where.readable)
    assert where.writable == () and where.devices == ()
    assert not any(home.is_relative_to(p) for p in where.readable)
    assert Path.cwd() not in where.readable


def test_the_bwrap_command_isolates_and_drops_everything(home):
    sandbox = Sandbox("bwrap", "/usr/bin/bwrap", Limits(2048, 64), features=frozenset({"--size"}))
    argv = sandbox.command(layout((home / "models" / "m",)))
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv.index("--tmpfs") < argv.index("--ro-bind")  # binds under /tmp stay visible
    assert "--bind" not in argv  # nothing writable but the private /tmp
    bound = [Path(argv[i + 1]) for i, arg in enumerate(argv) if arg == "--ro-bind"]
    assert home / "models" / "m" in bound
    assert not [p for p in bound if home.is_relative_to(p)]


def test_the_worker_environment_is_built_from_nothing(monkeypatch):
    monkeypatch.setenv("QB_RUNNER_TOKEN", "qb_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    env = worker_env(threads=2)
    assert not [k for k in env if k.startswith("QB_") or k.startswith("AWS")]
    assert env["HF_HUB_OFFLINE"] == "1" and env["OMP_NUM_THREADS"] == "2"
    assert env["HOME"].startswith("/tmp/")


def test_none_is_no_sandbox_and_a_missing_tool_is_one_clear_error(monkeypatch, tmp_path, caplog):
    assert resolve_sandbox("none", Limits(2048, 64)) is None
    assert "NO SANDBOX" in caplog.text
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="bwrap is not installed.*--no-sandbox"):
        resolve_sandbox("bwrap", Limits(2048, 64))
