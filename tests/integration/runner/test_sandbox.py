"""Model code runs in a sandbox: hostile models against the real runner loop.

Each hostile model is a local checkpoint whose ``config.json`` maps ``AutoConfig``
and ``AutoTokenizer`` to Python files in the directory. With
``trust_remote_code`` the hf backend imports them, so their module-level code (the
payload) runs inside the sandboxed worker, as a malicious Hub repository's would.
The payload reports what it managed by raising an error that starts with
``payload ran:``; the runner's outcome carries that message, which proves the
payload ran inside and shows what it saw.

No mocks of the sandbox: real bubblewrap, the real ``unshare`` fallback, real
limits. Only the server is a fake :class:`LeaseClient`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import pytest

from quorumbench import protocol
from quorumbench.backends import BackendOptions
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.errors import ConfigError
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples
from quorumbench.runner.client import Identity, Lease
from quorumbench.runner.loop import Runner, TaskEvaluator
from quorumbench.runner.sandbox import (
    Limits,
    Sandbox,
    default_memory_mb,
    protected_paths,
    resolve_sandbox,
)

pytestmark = pytest.mark.slow

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- qb-test-secret-7f3a9c -----END"
LIMIT_S = 20.0
"""Wall time of a task in these tests."""
SHORT_LIMIT_S = 8.0
"""Wall time for payloads that never finish (the fork bomb, the endless loop)."""
SLACK_S = 10.0
"""What killing and cleaning up a sandbox may add to the limit."""
SANDBOXES = ["bwrap", "unshare"]


def _unavailable(reason: str) -> None:
    if os.environ.get("QB_REQUIRE_ALL") == "1":
        pytest.fail(f"QB_REQUIRE_ALL=1 but {reason}")
    pytest.skip(reason)


@cache
def _arith() -> ArithBenchmark:
    return ArithBenchmark(BenchmarkContext())


@cache
def _sample_ids(n: int, seed: str) -> tuple[str, ...]:
    return tuple(s.id for s in select_samples(_arith(), n, seed))


def make_task(ref: str, task_id: int = 1, n: int = 2, seed: str = "sandbox") -> dict:
    arith = _arith()
    return {
        "id": task_id,
        "epoch": 1,
        "round": 1,
        "model": {"id": 1, "ref": ref},
        "benchmark": {
            "name": arith.name,
            "version": arith.version,
            "prompt_version": arith.prompt_version,
            "dataset_sha256": arith.dataset_sha256,
            "config": dict(arith.config),
        },
        "n_samples": n,
        "seed_commitment": hashlib.sha256(seed.encode()).hexdigest(),
        "sample_ids": list(_sample_ids(n, seed)),
    }


class FakeClient:
    """Hands out the given tasks; records everything the runner sends."""

    def __init__(self, tasks, key_ids=()):
        self.tasks = list(tasks)
        self.released: list[int] = []
        self.submitted: list[dict] = []
        self.key_ids = list(key_ids)
        """The runner's registered keys, for the pre-flight."""

    def me(self):
        return Identity(1, "alice", False, frozenset({"task:pull", "task:submit"}))

    def runner_keys(self):
        return [{"key_id": key_id, "revoked_at": None} for key_id in self.key_ids]

    def pull(self):
        if not self.tasks:
            return None
        expires = datetime.now(UTC) + timedelta(seconds=600)
        return Lease(100, 1, expires, protocol.Task.model_validate(self.tasks.pop(0)), 600.0)

    def heartbeat(self, lease, within_s=None):
        return lease

    def release(self, lease):
        self.released.append(lease.lease_id)

    def fail(self, lease, reason):  # the slot goes back, as on a release
        self.released.append(lease.lease_id)

    def submit(self, lease, payload):
        self.submitted.append(payload.model_dump(mode="json"))
        return protocol.Receipt(
            result_id=1, task_id=lease.task_id, task_status="PENDING", round=1, duplicate=False
        )

    def close(self):
        pass


def sandbox_for(kind: str, *, memory_mb: int = 3072, processes: int = 64) -> Sandbox:
    """A real sandbox of ``kind`` (after ``$HOME`` is set: it is what stays hidden)."""
    try:
        found = resolve_sandbox(kind, Limits(memory_mb, processes), protected_paths())  # type: ignore[arg-type]
    except ConfigError as exc:
        _unavailable(exc.message)
    assert found is not None
    return found


def hostile_model(directory: Path, payload: str) -> Path:
    """A checkpoint whose configuration and tokenizer modules run ``payload``."""
    for module in ("torch", "transformers", "safetensors"):
        if importlib.util.find_spec(module) is None:
            _unavailable(f"{module} is not installed (pip install -e '.[hf]')")
    import numpy as np
    from safetensors.numpy import save_file

    directory.mkdir(parents=True)
    save_file({"weight": np.zeros((2, 2), dtype=np.float32)}, str(directory / "model.safetensors"))
    auto_map = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None],
    }
    config = {"model_type": "evil", "auto_map": auto_map}
    (directory / "config.json").write_text(json.dumps(config))
    tokenizer = {"tokenizer_class": "EvilTokenizer", "auto_map": auto_map}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    config_code = (
        f"{payload}\n\nfrom transformers import PretrainedConfig\n\n\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"
    )
    (directory / "configuration_evil.py").write_text(config_code)
    (directory / "tokenization_evil.py").write_text(
        f"{payload}\n\nfrom transformers import PreTrainedTokenizer\n\n\n"
        "class EvilTokenizer(PreTrainedTokenizer):\n    pass\n"
    )
    return directory


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    """``$HOME`` for the runner: a private key in ``.ssh``; hidden from the sandbox."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    (home / ".config" / "quorumbench").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def descendants(pid: int) -> set[str]:
    """Processes below ``pid`` (from /proc), as ``pid cmdline`` strings."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[str] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                frontier.append(child)
                try:
                    found.append(f"{child} {(Path('/proc') / str(child) / 'cmdline').read_text()}")
                except OSError:
                    found.append(str(child))
    return set(found)


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Whatever a test started (sandboxes, forks in them) is gone when it ends."""
    before = descendants(os.getpid())
    yield
    assert descendants(os.getpid()) - before == set()
    assert leftover_cgroups() == []


def leftover_cgroups() -> list[str]:
    root = Path("/sys/fs/cgroup/pids")
    prefix = f"quorumbench-{os.getpid()}-"
    return [p.name for p in root.glob(prefix + "*")] if root.is_dir() else []


def run_hostile(sandbox: Sandbox, model: Path, limit_s: float = LIMIT_S):
    """One task on ``model`` through the real loop; (outcome, seconds, client)."""
    client = FakeClient([make_task(f"hf:{model}")])
    options = BackendOptions(device="cpu", trust_remote_code=True, threads=1)
    evaluator = TaskEvaluator(options=options, batch_size=2, sandbox=sandbox)
    runner = Runner(client, evaluator, task_time_limit_s=limit_s, min_heartbeat_s=0.5)
    running = descendants(os.getpid())
    started = time.monotonic()
    with runner:
        outcome = runner.run_once()
    elapsed = time.monotonic() - started
    assert outcome.status == "failed", outcome
    assert client.released == [100] and client.submitted == []
    assert elapsed < limit_s + SLACK_S, f"took {elapsed:.1f} s"
    assert descendants(os.getpid()) - running == set()
    assert leftover_cgroups() == []
    return outcome, elapsed, client


@pytest.mark.parametrize("kind", SANDBOXES)
def test_no_connection_leaves_the_sandbox(kind, fake_home, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    payload = f"""
import socket
seen = []
for address in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
    try:
        socket.create_connection(address, timeout=3)
        seen.append("connected")
    except OSError as exc:
        seen.append(type(exc).__name__ + str(exc.errno))
try:
    socket.getaddrinfo("example.com", 443)
    seen.append("resolved")
except OSError as exc:
    seen.append("dns " + type(exc).__name__)
raise RuntimeError("payload ran: " + " ".join(seen))
"""
    model = hostile_model(tmp_path / "model", payload)
    try:
        outcome, _, _ = run_hostile(sandbox_for(kind), model)
        assert "payload ran:" in outcome.detail, outcome.detail
        assert "connected" not in outcome.detail and "resolved" not in outcome.detail
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever knocked
    finally:
        listener.close()


@pytest.mark.parametrize("kind", SANDBOXES)
def test_home_and_keys_stay_out_of_reach(kind, fake_home, tmp_path, caplog, capfd):
    payload = f"""
import os
from pathlib import Path
real = Path({str(fake_home)!r})
seen = []
for target in [Path.home() / "planted", real / "planted", real / ".ssh" / "authorized_keys"]:
    try:
        target.write_text("owned")
        seen.append("wrote " + str(target))
    except OSError as exc:
        seen.append(type(exc).__name__)
for source in [real / ".ssh" / "id_ed25519", Path("~/.ssh/id_ed25519").expanduser()]:
    try:
        seen.append("read " + source.read_text())
    except OSError as exc:
        seen.append(type(exc).__name__)
for pid in ("1", "2"):  # the sandbox's own processes: nothing of the runner's
    try:
        text = Path("/proc", pid, "environ").read_text()
        seen.append("environ " + ("LEAK" if "QB_" in text or "secret" in text else "clean"))
    except OSError as exc:
        seen.append(type(exc).__name__)
raise RuntimeError("payload ran: " + " | ".join(seen))
"""
    model = hostile_model(tmp_path / "model", payload)
    before = snapshot(fake_home)
    caplog.set_level("DEBUG", logger="quorumbench")
    outcome, _, client = run_hostile(sandbox_for(kind), model)
    assert "payload ran:" in outcome.detail, outcome.detail
    assert "wrote /tmp/home/planted" in outcome.detail  # its own private $HOME
    assert f"wrote {fake_home}" not in outcome.detail and "read " not in outcome.detail
    assert "LEAK" not in outcome.detail
    assert snapshot(fake_home) == before
    printed = capfd.readouterr()
    for text in (outcome.detail, caplog.text, printed.out, printed.err, repr(client.submitted)):
        assert SECRET not in text and "qb-test-secret" not in text


@pytest.mark.parametrize("kind", SANDBOXES)
def test_a_fork_bomb_is_contained_and_killed(kind, fake_home, tmp_path, caplog):
    payload = """
import os, sys
print("payload started", file=sys.stderr, flush=True)
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    model = hostile_model(tmp_path / "model", payload)
    caplog.set_level("DEBUG", logger="quorumbench")
    outcome, elapsed, _ = run_hostile(sandbox_for(kind), model, SHORT_LIMIT_S)
    assert "time limit" in outcome.detail
    assert elapsed >= SHORT_LIMIT_S
    assert "payload started" in caplog.text


def test_unbounded_allocation_fails_the_task(fake_home, tmp_path):
    payload = """
chunks = []
try:
    while True:
        chunks.append(b"x" * (64 << 20))
except MemoryError:
    raise RuntimeError(f"payload ran: MemoryError after {len(chunks) * 64} MiB")
"""
    model = hostile_model(tmp_path / "model", payload)
    outcome, _, _ = run_hostile(sandbox_for("bwrap", memory_mb=2048), model)
    assert "payload ran: MemoryError" in outcome.detail, outcome.detail


def test_an_endless_loop_is_killed_at_the_time_limit(fake_home, tmp_path, caplog):
    payload = """
import sys
print("payload started", file=sys.stderr, flush=True)
while True:
    pass
"""
    model = hostile_model(tmp_path / "model", payload)
    caplog.set_level("DEBUG", logger="quorumbench")
    outcome, elapsed, _ = run_hostile(sandbox_for("unshare"), model, SHORT_LIMIT_S)
    assert "time limit" in outcome.detail and elapsed >= SHORT_LIMIT_S
    assert "payload started" in caplog.text


def test_the_worker_environment_holds_nothing_of_the_runner(fake_home, tmp_path, monkeypatch):
    monkeypatch.setenv("QB_RUNNER_TOKEN", "qb_token_must_not_leak")
    monkeypatch.setenv("QB_RUNNER_KEY_FILE", str(fake_home / "runner.key"))
    monkeypatch.setenv("QB_RUNNER_OPENAI_API_KEY", "sk-must-not-leak")
    payload = """
import os
raise RuntimeError("payload ran: " + ",".join(sorted(os.environ)) + " home=" + os.environ["HOME"])
"""
    model = hostile_model(tmp_path / "model", payload)
    outcome, _, _ = run_hostile(sandbox_for("bwrap"), model)
    names = outcome.detail.split("payload ran: ", 1)[1].split(" home=")[0].split(",")
    assert "PATH" in names and "HF_HUB_OFFLINE" in names
    assert not [n for n in names if n.startswith("QB_")], names
    assert "must-not-leak" not in outcome.detail and str(fake_home) not in outcome.detail


@pytest.mark.model
def test_the_bundled_model_scores_the_same_inside_and_outside(smollm2_backend, model_cache_dir):
    """In a sandbox the bundled SmolLM2 gives the same per-sample scores and output
    hashes as in the runner's own process (the session's in-process SmolLM2)."""
    task = make_task("bundled:smollm2-135m-instruct", n=3)
    sandbox = sandbox_for("auto", memory_mb=default_memory_mb(), processes=512)
    options = BackendOptions(device="cpu", cache_dir=model_cache_dir)
    runs = [
        TaskEvaluator(options=options, sandbox=sandbox),
        TaskEvaluator(backend_loader=lambda ref, options: smollm2_backend),
    ]
    payloads = []
    for evaluator in runs:
        client = FakeClient([task])
        outcome = Runner(client, evaluator).run_once()
        evaluator.evict(task["model"]["ref"])  # the sandboxed worker ends here
        assert outcome.status == "submitted", outcome
        payloads.append(client.submitted[0])
    inside, outside = payloads
    for key in (
        "sample_ids",
        "sample_scores",
        "sample_output_hashes",
        "outputs_sha256",
        "sample_predictions",
        "predictions_sha256",
        "score",
    ):
        assert inside[key] == outside[key], key
    # the worker measured itself and handed its figures back (docs/efficiency.md)
    measured, local = inside["measurements"], outside["measurements"]
    for key in ("prompt_tokens", "generated_tokens"):
        assert measured[key] == local[key] > 0, key
    assert measured["ttft_s"] > 0 and measured["decode_tokens_per_s"] > 0
    assert measured["peak_rss_bytes"] > 100 * 2**20  # the worker's, which holds the model
    assert measured["energy_method"] in ("rapl", "estimate") and measured["energy_kwh"] > 0


@pytest.mark.model
def test_a_gguf_file_is_converted_in_a_sandbox(smollm2_gguf, smollm2_dir, tmp_path):
    """The conversion runs sandboxed too, writing only its staging directory, and
    gives the same weights as the in-process conversion."""
    from quorumbench.backends.local import fetch_model
    from quorumbench.runner.worker import convert_sandboxed

    options = BackendOptions(device="cpu", cache_dir=tmp_path)
    model = fetch_model(f"gguf:{smollm2_gguf}", options)
    assert not model.converted
    sandbox = sandbox_for("auto", memory_mb=default_memory_mb(), processes=512)
    convert_sandboxed(model, options, sandbox)
    assert model.converted
    assert [p.name for p in (tmp_path / "gguf").iterdir() if p.is_dir()] == [model.revision]
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (model.directory / name).read_bytes() == (smollm2_dir / name).read_bytes(), name


def test_without_a_sandbox_the_runner_refuses_unless_told(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from quorumbench.cli.app import app
    from quorumbench.runner.keys import create_key

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # neither bwrap nor unshare
    limits = Limits(2048, 64)
    with pytest.raises(ConfigError, match="no sandbox for model code") as refused:
        resolve_sandbox("auto", limits)
    assert "bwrap is not installed" in refused.value.message
    assert "--no-sandbox" in refused.value.message
    with pytest.raises(ConfigError, match="unshare is not installed"):
        resolve_sandbox("unshare", limits)
    assert resolve_sandbox("none", limits) is None

    key = create_key(tmp_path / "r.key")
    server = FakeClient([], key_ids=[key.key_id])
    monkeypatch.setattr("quorumbench.runner.loop.ServerClient", lambda *a, **k: server)
    for var in [v for v in os.environ if v.startswith("QB_RUNNER_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("QB_RUNNER_KEY_FILE", str(key.path))
    monkeypatch.chdir(tmp_path)  # no .env here
    args = ["runner", "start", "--token", "qb_x", "--once"]
    refused_run = CliRunner().invoke(app, args)
    assert refused_run.exit_code == 1
    assert refused_run.output.startswith("error: no sandbox for model code")
    assert len(refused_run.output.strip().splitlines()) == 1

    allowed = CliRunner().invoke(app, [*args, "--no-sandbox"])
    assert allowed.exit_code == 0, allowed.output
    assert "NO SANDBOX" in allowed.output and "no task available" in allowed.output
    monkeypatch.setenv("QB_RUNNER_SANDBOX", "none")
    assert CliRunner().invoke(app, args).exit_code == 0
