"""``quorumbench submission validate`` and ``apply``, and examples/github's workflows.

The models live on a local Hub (test_header_only_metadata's, read through the real
Hub client); the server is a real uvicorn in a thread, on SQLite and PostgreSQL. The
workflows' own ``run:`` scripts are run with bash, as a runner runs them, on a
repository made in ``tmp_path``: only ``quorumbench`` and ``git`` are put on the path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import quorumbench
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import HfHubClient, inspect_model
from quorumbench.services.submissions.offline import ACCOUNT_CODES
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..pg import emptied, throwaway_database
from ..server.test_header_only_metadata import (  # noqa: F401 (fixtures)
    SHA,
    LocalHub,
    _safetensors,
    hub_dir,
    local_hub,
)

EXAMPLES = Path(__file__).parents[3] / "examples" / "github"
WORKFLOWS = sorted((EXAMPLES / "workflows").glob("*.yml"))
MAX_PARAMS = 5000
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32"}
runner = CliRunner()


def add_repo(
    hub: LocalHub,
    where: Path,
    repo_id: str,
    *,
    config: dict[str, Any] | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
    card: str | None = "---\nlicense: mit\n---\n# a model\n",
) -> None:
    """A checkpoint on the local Hub at commit SHA (3,072 parameters by default)."""
    folder = where / repo_id.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or LLAMA), encoding="utf-8")
    files = {
        "config.json": folder / "config.json",
        "model.safetensors": _safetensors(
            folder / "model.safetensors", shapes or {"embed": (64, 32), "layer.0": (32, 32)}
        ),
    }
    if card is not None:
        (folder / "README.md").write_text(card, encoding="utf-8")
        files["README.md"] = folder / "README.md"
    hub.add(repo_id, SHA, files)


@pytest.fixture
def hub(local_hub, hub_dir, tmp_path, monkeypatch) -> LocalHub:  # noqa: F811
    """The local Hub with a few models; this process's Hub client pointed at it."""
    add_repo(local_hub, hub_dir, "org/clean")
    add_repo(local_hub, hub_dir, "org/custom", config={**LLAMA, "auto_map": {"AutoModel": "m.M"}})
    add_repo(local_hub, hub_dir, "org/large", shapes={"w": (128, 128)})
    add_repo(local_hub, hub_dir, "org/nolicence", card=None)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", local_hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("QB_MAX_PARAMS", str(MAX_PARAMS))  # offline: this machine's settings
    return local_hub


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    with throwaway_database("qb_submission_files", migrated=True) as name:
        yield name


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'server.db'}"
    return emptied(request.getfixturevalue("pg_database"))


@dataclass
class Server:
    url: str
    tokens: dict[str, str]

    def models(self) -> list[dict[str, Any]]:
        import httpx

        found: list[dict[str, Any]] = httpx.get(f"{self.url}/v0/models").json()
        return found


def hub_context(db_url: str, folder: Path, hub: LocalHub, **settings: Any) -> ServerContext:
    """A server's context on ``db_url`` whose model reader is the local Hub's."""
    base: dict[str, Any] = {
        "data_dir": folder / "server",
        "database_url": db_url,
        "quota_evaluations": 0,
        "registrations_per_week": 10,
        "max_params": MAX_PARAMS,
        "benchmarks": ["arith"],
        "samples_per_task": 4,
        "canary_rate": 0.0,
    }
    ctx = build_context(ServerSettings(**{**base, **settings}))

    def inspect(ref: str) -> Any:
        with HfHubClient(hub.url, token="hf_test") as client:
            return inspect_model(ref, hub=client)

    ctx.inspector = inspect
    return ctx


@pytest.fixture
def server(db_url, tmp_path, hub) -> Iterator[Server]:
    ctx = hub_context(db_url, tmp_path, hub)
    tokens = {}
    for name in ("maintainer", "other"):
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name).token
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as embedded:
        yield Server(embedded.url, tokens)
    ctx.close()


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_saved_session(tmp_path, monkeypatch) -> None:
    """No session `quorumbench login` kept on this machine is found: the credential is
    QB_TOKEN or nothing (test_model_cmds tests the saved session with these commands)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def cli(*args: str, token: str | None = None) -> Any:
    return runner.invoke(app, ["submission", *args], env={"QB_TOKEN": token})


def codes(report: dict[str, Any], level: str | None = None) -> list[str]:
    return [f["code"] for f in report["findings"] if level is None or f["level"] == level]


# --- the command ------------------------------------------------------------------------


def test_offline_validation_runs_the_model_checks_and_says_what_it_did_not(hub, tmp_path):
    good = write(tmp_path, "good.yaml", f"model:\n  hf_repo: org/clean\n  revision: {SHA}\n")
    result = cli("validate", "--json", str(good))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True and report["quota"] is None and report["estimate"] is None
    assert report["pinned_ref"] == f"hf:org/clean@{SHA}"
    assert codes(report) == ["account-unchecked"]
    assert "5,000 parameters" in report["findings"][0]["message"]
    assert report["metadata"]["params"] == 3072 and report["metadata"]["license"] == "mit"
    table = cli("validate", str(good))
    assert table.exit_code == 0
    out = " ".join(table.output.split())
    assert "account-unchecked" in out and "accepted by the checks made here" in out
    assert "the account's limits (quota, weekly registrations) were not checked" in out

    custom = write(tmp_path, "custom.yaml", "model:\n  hf_repo: org/custom\n  revision: main\n")
    refused = cli("validate", "--json", str(custom))
    assert refused.exit_code == 1
    report = json.loads(refused.output)
    assert codes(report, "error") == ["remote-code"] and "ref-pinned" in codes(report)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("model:\n  hf_repo: [org/clean\n", "yaml-malformed"),
        ("model:\n  hf_repo: org/clean\n  paramters: 1B\n", "unknown-key"),
        ("notes: no model\n", "model-missing"),
        (f"model:\n  hf_repo: org/clean\n  ref: hf:org/clean@{SHA}\n", "model-conflict"),
        ("model:\n  ref: hf:org/clean@not..a..ref\n", "ref-invalid"),
    ],
)
def test_a_refused_file_is_reported_and_nothing_is_sent(hub, tmp_path, text, code):
    path = write(tmp_path, "bad.yaml", text)
    result = cli("validate", "--json", str(path), "--server", "http://127.0.0.1:9")
    assert result.exit_code == 1  # no server at port 9: nothing was sent
    report = json.loads(result.output)
    assert report["ok"] is False and codes(report) == [code]
    assert hub.requests == []  # nothing was looked up either
    table = cli("validate", str(path))
    assert table.exit_code == 1 and code in table.output
    assert "refused: registering it would fail" in " ".join(table.output.split())


def test_validate_with_a_server_prints_the_servers_report(server, tmp_path):
    import httpx

    path = write(
        tmp_path, "s.yaml", "model:\n  hf_repo: org/clean\n  revision: main\n  name: Clean\n"
    )
    result = cli(
        "validate", "--json", str(path), "--server", server.url, token=server.tokens["other"]
    )
    assert result.exit_code == 0, result.output
    direct = httpx.post(
        f"{server.url}/v0/submissions/validate",
        json={"ref": "hf:org/clean@main", "name": "Clean"},
        headers={"Authorization": f"Bearer {server.tokens['other']}"},
    ).json()
    assert json.loads(result.output) == direct  # exactly the server's
    assert codes(direct) == ["limits-ok", "ref-pinned", "cost-estimate"]
    assert server.models() == []

    no_token = cli("validate", str(path), "--server", server.url)
    assert no_token.exit_code == 1 and "set QB_TOKEN" in no_token.output
    assert f"not logged in to {server.url}" in " ".join(no_token.output.split())
    bad_token = cli("validate", str(path), "--server", server.url, token="qb_wrong")
    assert bad_token.exit_code == 1 and "refused the API token in QB_TOKEN" in bad_token.output


def test_apply_registers_once_and_refuses_with_the_first_errors_sentence(server, tmp_path):
    good = write(
        tmp_path, "good.yaml", "model:\n  hf_repo: org/clean\n  revision: main\n  family: llama\n"
    )
    first = cli("apply", str(good), "--server", server.url, token=server.tokens["maintainer"])
    assert first.exit_code == 0, first.output
    assert "registered: model 1" in first.output
    assert "accepted: registering it would succeed now" in " ".join(first.output.split())
    again = cli("apply", str(good), "--server", server.url, token=server.tokens["maintainer"])
    assert again.exit_code == 0, again.output
    assert "already registered by this account: model 1" in again.output
    assert "already-registered" in again.output
    [model] = server.models()
    assert model["ref"] == f"hf:org/clean@{SHA}" and model["family"] == "llama"

    theirs = cli("apply", str(good), "--server", server.url, token=server.tokens["other"])
    assert theirs.exit_code == 1
    assert f"error: hf:org/clean@{SHA} is registered already: model 1" in " ".join(
        theirs.output.split()
    )
    large = write(tmp_path, "large.yaml", "model:\n  hf_repo: org/large\n  revision: main\n")
    refused = cli("apply", str(large), "--server", server.url, token=server.tokens["maintainer"])
    assert refused.exit_code == 1
    assert "params-over-limit" in refused.output
    assert "error: hf:org/large@" in refused.output and "accepts at most 5,000" in refused.output
    assert len(server.models()) == 1


@pytest.mark.parametrize("repo", ["org/clean", "org/custom", "org/large", "org/nolicence"])
def test_the_offline_report_and_the_servers_have_the_same_model_findings(server, tmp_path, repo):
    """The same report at every door: what the model checks find is the same offline
    and on the server; only the account's checks differ."""
    path = write(tmp_path, "s.yaml", f"model:\n  hf_repo: {repo}\n  revision: main\n")
    offline = json.loads(cli("validate", "--json", str(path)).output)
    online = json.loads(
        cli(
            "validate", "--json", str(path), "--server", server.url, token=server.tokens["other"]
        ).output
    )
    model_findings = [f for f in online["findings"] if f["code"] not in ACCOUNT_CODES]
    assert [f for f in offline["findings"] if f["code"] != "account-unchecked"] == model_findings
    assert model_findings  # at least ref-pinned
    assert offline["metadata"] == online["metadata"]
    assert offline["pinned_ref"] == online["pinned_ref"]
    assert offline["ok"] == online["ok"]


# --- the example workflows --------------------------------------------------------------


def test_the_workflows_pass_the_github_workflow_schema():
    assert len(WORKFLOWS) == 3
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def steps(workflow: str) -> dict[str, dict[str, Any]]:
    loaded = yaml.safe_load((EXAMPLES / "workflows" / workflow).read_text(encoding="utf-8"))
    [job] = loaded["jobs"].values()
    return {step.get("name", step.get("uses", "")): step for step in job["steps"]}


def test_no_run_script_interpolates_an_expression_and_tokens_are_narrow():
    for path in WORKFLOWS:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        for job in loaded["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (path.name, step.get("name"))
                assert "ref" not in step.get("with", {}), "never a checkout of the PR's head"
        text = path.read_text(encoding="utf-8")
        assert "pull_request_target" not in text and "issue_comment" not in text
    validate = yaml.safe_load((EXAMPLES / "workflows" / "submission-validate.yml").read_text())
    assert validate["permissions"] == {"contents": "read"} and "secrets." not in str(validate)
    comment = yaml.safe_load((EXAMPLES / "workflows" / "submission-comment.yml").read_text())
    assert "actions/checkout" not in str(comment)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def pull_request_repo(tmp_path: Path) -> Path:
    """A leaderboard repository whose last commit adds good, bad and odd files."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.org")
    git(repo, "config", "user.name", "t")
    write(repo / "submissions", "existing.yaml", "model:\n  hf_repo: org/existing\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    shutil.copy(EXAMPLES / "submissions" / "smollm2-135m-instruct.yaml", repo / "example.yaml")
    write(repo / "submissions", "good.yaml", f"model:\n  hf_repo: org/clean\n  revision: {SHA}\n")
    write(repo / "submissions", "bad.yaml", "model:\n  hf_repo: org/clean\n  extra: 1\n")
    write(repo / "submissions", "odd name.yaml", "model:\n  hf_repo: org/clean\n")
    write(repo, "secret.yaml", "model:\n  ref: hf:org/secret-value@main\n  x: 1\n")
    (repo / "submissions" / "link.yaml").symlink_to("../secret.yaml")
    write(repo / "src", "evil.py", "raise SystemExit('the pull request ran code')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "submit")
    return repo


def run_step(
    step: dict[str, Any], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A ``run:`` step as a GitHub runner runs it (bash -eo pipefail), with only the
    given environment, quorumbench (these sources) and the usual tools."""
    script = cwd / "step.sh"
    script.write_text(step["run"], encoding="utf-8")
    base = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(Path(quorumbench.__file__).parents[1]),
        "HOME": str(cwd),
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_validate_workflow_reports_each_changed_file_and_runs_nothing(hub, tmp_path):
    repo = pull_request_repo(tmp_path)
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    step = steps("submission-validate.yml")["Validate the changed submission files"]
    assert step["working-directory"] == "${{ runner.temp }}"
    env = {
        "RUNNER_TEMP": str(temp),
        "GITHUB_WORKSPACE": str(repo),
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": "hf_test",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    done = run_step(step, temp, env)
    assert done.returncode == 1, done.stdout + done.stderr  # bad.yaml, the odd name, the link
    assert "the pull request ran code" not in done.stdout + done.stderr
    reports = {p.name: json.loads(p.read_text()) for p in (temp / "report").glob("*.json")}
    assert set(reports) == {"good.yaml.json", "bad.yaml.json"}  # existing.yaml is unchanged
    assert reports["good.yaml.json"]["ok"] is True
    assert codes(reports["good.yaml.json"]) == ["account-unchecked"]
    assert codes(reports["bad.yaml.json"]) == ["unknown-key"]
    assert "::error::a submission file's name may hold only" in done.stdout
    assert "::error::submissions/link.yaml is not a regular file" in done.stdout
    assert "secret-value" not in done.stdout
    assert not any("secret" in request for request in hub.requests)

    # The comment workflow renders those reports as data.
    comment_dir = tmp_path / "comment"
    shutil.copytree(temp / "report", comment_dir / "report")
    evil = dict(reports["bad.yaml.json"])
    evil["findings"] = [
        {
            "code": "x|y",
            "level": "error",
            "field": None,
            "message": "<img src=x> @octocat [click](http://evil) `code`\n| injected |",
        }
    ]
    (comment_dir / "report" / "evil.yaml.json").write_text(json.dumps(evil))
    (comment_dir / "report" / "broken.yaml.json").write_text("not json {")
    render = steps("submission-comment.yml")["Render the comment"]
    rendered = run_step(render, comment_dir, {"RUN_URL": "https://github.example/run/1"})
    assert rendered.returncode == 0, rendered.stderr
    comment = (comment_dir / "comment.trimmed.md").read_text()
    assert comment.startswith("<!-- quorumbench-submission-report -->\n")
    assert f"#### good.yaml: ok (hf:org/clean&#64;{SHA})" in comment
    assert "#### bad.yaml: **refused**" in comment and "| error | unknown-key |" in comment
    assert (
        "&lt;img src=x&gt; &#64;octocat \\[click\\](http://evil) \\`code\\` \\| injected \\|"
        in (comment)
    )
    assert "| error | x\\|y |" in comment
    assert "<img" not in comment and "@octocat" not in comment
    assert "A report that is not a submission report" in comment
    assert comment.rstrip().endswith("[The validation run](https://github.example/run/1)")


def test_the_register_workflow_applies_the_merged_files_once(server, tmp_path):
    repo = pull_request_repo(tmp_path)
    (repo / "submissions" / "bad.yaml").unlink()
    (repo / "submissions" / "link.yaml").unlink()
    (repo / "submissions" / "odd name.yaml").unlink()
    write(repo / "submissions", "large.yaml", "model:\n  hf_repo: org/large\n  revision: main\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "merge")
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    step = steps("submission-register.yml")["Register the merged submission files"]
    env = {
        "RUNNER_TEMP": str(temp),
        "GITHUB_WORKSPACE": str(repo),
        "BEFORE": git(repo, "rev-parse", "HEAD~2"),
        "AFTER": git(repo, "rev-parse", "HEAD"),
        "QB_SERVER": server.url,
        "QB_TOKEN": server.tokens["maintainer"],
    }
    first = run_step(step, temp, env)
    output = " ".join(first.stdout.split())
    assert first.returncode == 1, first.stdout + first.stderr  # large.yaml is refused
    assert "registered: model 1" in output and "accepts at most 5,000" in output
    assert [m["ref"] for m in server.models()] == [f"hf:org/clean@{SHA}"]
    again = run_step(step, temp, {**env, "BEFORE": "0" * 40})  # a new branch: every file
    assert "already registered by this account: model 1" in " ".join(again.stdout.split())
    assert "hf:org/existing" in again.stdout  # the base's file too, refused: not on the Hub
    assert len(server.models()) == 1
