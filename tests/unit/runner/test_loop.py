"""The runner loop with a fake server client and the scripted MockBackend."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from quorumbench import protocol
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    DataNotFoundError,
    Hint,
    InvalidSubmissionError,
    LeaseExpiredError,
    MissingDependencyError,
    ModelLoadError,
    NotFoundError,
    ServerUnavailableError,
    SignatureError,
    UnsupportedProtocolError,
)
from quorumbench.evaluation.backend import ModelInfo
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples
from quorumbench.runner.client import Identity, Lease
from quorumbench.runner.faults import RunnerSetupError
from quorumbench.runner.keys import create_key, key_file_for, load_key
from quorumbench.runner.loop import (
    LeaseKeeper,
    Runner,
    TaskEvaluator,
    build_runner,
    result_payload,
    stop_on_signals,
)
from quorumbench.settings import RunnerSettings

MODEL = "bundled:mock-model"


@pytest.fixture(scope="module")
def arith():
    return ArithBenchmark(BenchmarkContext())


@cache
def task_ids(n: int, seed: str) -> tuple[str, ...]:
    return tuple(s.id for s in select_samples(ArithBenchmark(BenchmarkContext()), n, seed))


def make_task(arith, task_id=1, *, n=3, seed="s", model=MODEL, **bench_overrides):
    bench = {
        "name": arith.name,
        "version": arith.version,
        "prompt_version": arith.prompt_version,
        "dataset_sha256": arith.dataset_sha256,
        "config": dict(arith.config),
        **bench_overrides,
    }
    return {
        "id": task_id,
        "epoch": 1,
        "round": 1,
        "model": {"id": 1, "ref": model},
        "benchmark": bench,
        "n_samples": n,
        "seed_commitment": hashlib.sha256(seed.encode()).hexdigest(),
        "sample_ids": list(task_ids(n, seed)),
    }


def receipt(lease, **answer):
    """The server's answer to a submission under ``lease``."""
    return protocol.Receipt.model_validate(
        {"result_id": 1, "task_id": lease.task_id, "round": 1, **answer}
    )


class FakeClient:
    """Hands out scripted tasks and records every call.

    For the pre-flight it answers ``GET /v0/me`` with ``identity`` and lists
    ``key_ids`` as the runner's keys (None: the account never used the runner name).
    """

    def __init__(self, tasks, *, ttl_s=60.0, heartbeat_error=None, when_empty=None):
        self.identity = Identity(1, "alice", False, frozenset({"task:pull", "task:submit"}))
        self.key_ids: list[str] | None = []
        self.revoked: set[str] = set()
        self.key = None
        self.failed: list[tuple[int, str]] = []
        self.tasks = list(tasks)
        self.ttl_s = ttl_s
        self.heartbeat_error = heartbeat_error
        self.when_empty = when_empty
        self.pulled: list[Lease] = []
        self.heartbeats: list[int] = []
        self.heartbeat_called = threading.Event()
        self.released: list[int] = []
        self.submitted: list[tuple[int, dict]] = []
        self.submit_answer = {"result_id": 1, "task_status": "PENDING", "duplicate": False}
        self.closed = False

    def pull(self):
        if not self.tasks:
            if self.when_empty is not None:
                self.when_empty()
            return None
        task = self.tasks.pop(0)
        if isinstance(task, Exception):
            raise task
        lease_id = len(self.pulled) + 100
        expires = datetime.now(UTC) + timedelta(seconds=self.ttl_s)
        lease = Lease(lease_id, 1, expires, protocol.Task.model_validate(task), self.ttl_s)
        self.pulled.append(lease)
        return lease

    def heartbeat(self, lease, within_s=None):
        self.heartbeats.append(lease.lease_id)
        self.heartbeat_called.set()
        if self.heartbeat_error is not None:
            raise self.heartbeat_error
        return lease

    def release(self, lease):
        self.released.append(lease.lease_id)

    def fail(self, lease, reason):  # the slot goes back, and the failure is recorded
        self.failed.append((lease.lease_id, reason))

    def me(self):
        return self.identity

    def runner_keys(self):
        if self.key_ids is None:
            raise NotFoundError("this account has no runner 'r1'")
        return [
            {"key_id": k, "revoked_at": "2030-01-01T00:00:00Z" if k in self.revoked else None}
            for k in self.key_ids
        ]

    def submit(self, lease, payload):
        self.submitted.append((lease.lease_id, payload.model_dump(mode="json")))
        return receipt(lease, **self.submit_answer)

    def close(self):
        self.closed = True


def make_runner(client, backend_loader=None, **kwargs):
    loads: list[str] = []

    def default_loader(ref, options):
        loads.append(ref)
        return MockBackend(lambda p: "#### 4")

    evaluator = TaskEvaluator(
        backend_loader=backend_loader or default_loader, batch_size=2, **kwargs
    )
    runner = Runner(
        client, evaluator, min_idle_backoff_s=0.01, max_idle_backoff_s=0.02, min_heartbeat_s=0.01
    )
    runner.loads = loads
    return runner


def test_a_task_is_evaluated_and_submitted_once(arith):
    task = make_task(arith, 5)
    client = FakeClient([task])
    outcome = make_runner(client).run_once()
    assert outcome.status == "submitted" and outcome.ok
    assert (outcome.task_id, outcome.lease_id) == (5, 100)
    assert client.released == []
    assert len(client.submitted) == 1
    lease_id, payload = client.submitted[0]
    assert lease_id == 100
    assert payload["task_id"] == 5
    assert payload["n"] == 3
    assert payload["sample_ids"] == task["sample_ids"]
    assert len(payload["sample_scores"]) == len(payload["sample_output_hashes"]) == 3
    assert payload["score"] == pytest.approx(sum(payload["sample_scores"]) / 3)
    assert payload["model_revision"] == "0" * 64
    assert "hardware" in payload["hardware"] and "libraries" in payload["hardware"]
    assert len(payload["outputs_sha256"]) == 64


def test_no_work_is_reported():
    outcome = make_runner(FakeClient([])).run_once()
    assert outcome.status == "no-work" and outcome.ok


def test_a_duplicate_answer_counts_as_submitted(arith):
    client = FakeClient([make_task(arith)])
    client.submit_answer = {"duplicate": True, "task_status": "DONE"}
    assert make_runner(client).run_once().status == "duplicate"


def test_heartbeat_409_abandons_the_work_without_submitting(arith):
    client = FakeClient(
        [make_task(arith, n=2)], ttl_s=0.03, heartbeat_error=LeaseExpiredError("superseded")
    )

    def slow_answer(prompt):
        client.heartbeat_called.wait(5)
        for thread in threading.enumerate():  # it records the loss, then ends
            if thread.name.startswith("quorumbench-heartbeat-"):
                thread.join(5)
        return "#### 4"

    runner = make_runner(client, lambda ref, options: MockBackend(slow_answer))
    outcome = runner.run_once()
    assert outcome.status == "abandoned"
    assert "superseded" in outcome.detail
    assert client.submitted == []
    assert client.released == []  # the lease is gone already


def test_heartbeats_keep_the_lease_while_a_task_runs(arith):
    client = FakeClient([make_task(arith, n=2)], ttl_s=0.03)

    def answer(prompt):
        deadline = time.monotonic() + 5
        while len(client.heartbeats) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        return "#### 4"

    outcome = make_runner(client, lambda ref, options: MockBackend(answer)).run_once()
    assert outcome.status == "submitted"
    assert len(client.heartbeats) >= 2


def test_a_failed_heartbeat_is_tried_again_at_once_and_the_lease_kept(arith):
    """A heartbeat that timed out against a slow server (issue 29: the lease was lost 18 s
    later, and 5 minutes of work with it) is tried again at once, not a third of the
    lease later, each time within what the lease has left."""
    calls: list[tuple[float, float | None]] = []
    third = threading.Event()

    class SlowServer:
        def heartbeat(self, lease, within_s=None):
            calls.append((time.monotonic(), within_s))
            if len(calls) < 3:
                raise ServerUnavailableError("cannot reach the server (ReadTimeout) for 2 s")
            third.set()
            return lease

    expires = datetime.now(UTC) + timedelta(seconds=3)
    lease = Lease(100, 1, expires, protocol.Task.model_validate(make_task(arith)), 3.0)
    started = time.monotonic()
    keeper = LeaseKeeper(SlowServer(), lease, min_interval_s=0.05)
    keeper.start()
    assert third.wait(10)
    keeper.stop()
    assert not keeper.lost.is_set()
    (first, within), (second, _), (then, _) = calls[:3]
    assert first - started >= 0.9  # the first beat: a third of the 3 s lease
    assert 0 < within <= 2.1  # retried for what the lease had left, about 2 s
    assert second - first < 0.5 and then - second < 0.5  # again at once, not 1 s later


def test_a_stop_request_releases_the_lease(arith):
    stop = threading.Event()
    client = FakeClient([make_task(arith, n=4)])

    def answer(prompt):
        stop.set()
        return "#### 4"

    runner = make_runner(client, lambda ref, options: MockBackend(answer))
    outcome = runner.run_once(stop)
    assert outcome.status == "stopped"
    assert client.released == [100]
    assert client.submitted == []


def test_stop_before_pulling_pulls_nothing(arith):
    stop = threading.Event()
    stop.set()
    client = FakeClient([make_task(arith)])
    assert make_runner(client).run_once(stop).status == "stopped"
    assert client.pulled == []


def test_keyboard_interrupt_releases_the_lease_and_propagates(arith):
    client = FakeClient([make_task(arith)])

    def answer(prompt):
        raise KeyboardInterrupt

    runner = make_runner(client, lambda ref, options: MockBackend(answer))
    with pytest.raises(KeyboardInterrupt):
        runner.run_once()
    assert client.released == [100]
    assert client.submitted == []


def test_a_load_error_is_reported_as_a_failure_and_the_loop_goes_on(arith):
    stop = threading.Event()
    client = FakeClient(
        [make_task(arith, 1, model="bundled:broken"), make_task(arith, 2)], when_empty=stop.set
    )

    def loader(ref, options):
        if ref == "bundled:broken":
            raise ModelLoadError("weights are corrupt")
        return MockBackend(lambda p: "#### 4")

    submitted = make_runner(client, loader).run_forever(stop)
    assert submitted == 1
    assert client.failed == [(100, "weights are corrupt")]  # the model's fault: reported
    assert client.released == []
    assert [lease_id for lease_id, _ in client.submitted] == [101]
    assert client.submitted[0][1]["task_id"] == 2


def test_an_unexpected_backend_crash_releases_and_reports(arith, caplog):
    client = FakeClient([make_task(arith)])

    def answer(prompt):
        raise RuntimeError("CUDA out of memory")

    outcome = make_runner(client, lambda ref, options: MockBackend(answer)).run_once()
    assert outcome.status == "failed"
    assert "CUDA out of memory" in outcome.detail
    assert [lease_id for lease_id, _ in client.failed] == [100]


def test_a_newer_benchmark_version_is_released_and_stops_the_runner(arith):
    """This runner's quorumbench is out of date: no failure is recorded (the task is
    fine), the slot reopens at once, and the runner stops instead of pulling the next
    task of that benchmark only to give it back."""
    stop = threading.Event()
    tasks = [make_task(arith, version=arith.version + 1), make_task(arith, 2)]
    client = FakeClient(tasks, when_empty=stop.set)
    runner = make_runner(client)
    with pytest.raises(RunnerSetupError, match="out of date, upgrade it"):
        runner.run_forever(stop)
    assert client.released == [100]
    assert client.failed == [] and client.submitted == []
    assert len(client.pulled) == 1, "no hot loop of pull and release"
    assert runner.loads == [], "the model is not loaded for a task the runner cannot do"


def test_a_data_mismatch_is_a_setup_error(arith):
    client = FakeClient([make_task(arith, dataset_sha256="f" * 64)])
    outcome = make_runner(client).run_once()
    assert outcome.status == "setup-error" and outcome.ends_runner
    assert "data mismatch" in outcome.detail
    assert "QB_RUNNER_DATASETS_DIR" in outcome.detail
    assert client.released == [100] and client.failed == []


def test_missing_data_names_the_variables_the_runner_reads(arith):
    def loader(name, context):
        raise DataNotFoundError(
            "cannot download org/data@abc/test.parquet from the Hub (ConnectError)",
            hint=Hint("datasets_dir", "offline, give a datasets directory that holds a copy"),
        )

    client = FakeClient([make_task(arith)])
    runner = make_runner(client)
    runner.evaluator = TaskEvaluator(benchmark_loader=loader, datasets_dir=Path("/data/here"))
    outcome = runner.run_once()
    assert outcome.status == "setup-error"
    assert outcome.detail.startswith("cannot download org/data@abc/test.parquet")
    assert "give a datasets directory" not in outcome.detail  # the engine's advice
    assert "reads benchmark data from /data/here" in outcome.detail
    assert "--datasets-dir or QB_RUNNER_DATASETS_DIR" in outcome.detail
    assert client.released == [100] and client.failed == []


def test_a_missing_package_is_a_setup_error_and_a_load_error_is_not(arith):
    def loader(ref, options):
        raise MissingDependencyError("gguf", "gguf")

    client = FakeClient([make_task(arith)])
    outcome = make_runner(client, loader).run_once()
    assert outcome.status == "setup-error"
    assert "pip install 'quorumbench[gguf]'" in outcome.detail
    assert client.released == [100] and client.failed == []


def test_a_task_whose_engine_the_runner_lacks_is_given_back_without_a_failure(arith):
    task = make_task(arith)
    task["model"]["engine"] = "llamacpp"
    client = FakeClient([task])
    runner = make_runner(client, engines=("transformers", "endpoint"))
    outcome = runner.run_once()
    assert outcome.status == "setup-error"
    assert "evaluated by the llamacpp engine, which this runner does not have" in outcome.detail
    assert "pip install 'xllamacpp==" in outcome.detail
    assert client.released == [100] and client.failed == [] and client.submitted == []
    assert runner.loads == [], "nothing is loaded"


def test_the_tasks_engine_loads_the_model_and_the_result_names_it(arith):
    seen: list[str] = []

    def loader(ref, options):
        seen.append(options.engine)
        # a model that says it ran as the engine loaded it would (ModelInfo.backend)
        backend = "llamacpp" if options.engine == "llamacpp" else "gguf"
        return MockBackend(lambda p: "#### 4", info=ModelInfo(ref, backend, "0" * 64, False))

    task = make_task(arith)
    task["model"]["engine"] = "llamacpp"
    client = FakeClient([task, make_task(arith, 2)])
    runner = make_runner(client, loader, engines=("transformers", "llamacpp", "endpoint"))
    assert runner.run_once().status == "submitted"
    assert runner.run_once().status == "submitted"  # no engine named: the runner's own
    assert seen == ["llamacpp", "transformers"]
    assert [payload["engine"] for _, payload in client.submitted] == ["llamacpp", "transformers"]


def test_a_pull_lists_the_engines_only_from_protocol_1_3():
    from quorumbench.runner.client import ServerClient

    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(204)

    for version in ("1.3", "1.2"):
        client = ServerClient(
            "http://server",
            SecretStr("t"),
            "r",
            transport=httpx.MockTransport(handler),
            protocol_version=version,
        )
        client.engines = ("transformers", "llamacpp", "endpoint")
        assert client.pull() is None
    sent = [json.loads(body) for body in bodies]
    assert sent[0]["engines"] == ["transformers", "llamacpp", "endpoint"]
    assert "engines" not in sent[1]  # a 1.2 body has no such field


def test_a_private_openai_endpoint_is_the_models_failure_unless_allowed(arith):
    ref = "openai:http://127.0.0.1:9/v1#m"
    client = FakeClient([make_task(arith, model=ref)])
    runner = make_runner(client)
    outcome = runner.run_once()
    assert outcome.status != "setup-error"
    assert "loopback" in outcome.detail
    assert [lease_id for lease_id, _ in client.failed] == [100]
    assert runner.loads == [], "the endpoint is never called"

    client = FakeClient([make_task(arith, model=ref)])
    allowed = make_runner(client, allow_private_endpoints=True)
    assert allowed.run_once().status == "submitted"
    assert allowed.loads == [ref]


def test_sample_ids_the_benchmark_lacks_or_repeats_are_refused(arith):
    unknown = make_task(arith)
    unknown["sample_ids"][0] = "not-an-id"
    repeated = make_task(arith, 2)
    repeated["sample_ids"][1] = repeated["sample_ids"][0]
    for task, why in ((unknown, "arith has no sample"), (repeated, "lists 2 ids")):
        client = FakeClient([task])
        outcome = make_runner(client).run_once()
        assert outcome.status == "refused" and not outcome.ends_runner
        assert why in outcome.detail
        assert client.submitted == []
        assert [lease_id for lease_id, _ in client.failed] == [100]


def test_the_task_carries_no_secret_seed_and_its_own_ids_are_evaluated(arith):
    task = make_task(arith, seed="other")
    assert "seed" not in task
    client = FakeClient([task])
    assert make_runner(client).run_once().status == "submitted"
    assert client.submitted[0][1]["sample_ids"] == task["sample_ids"]


def test_an_expired_lease_at_submit_is_abandoned(arith):
    client = FakeClient([make_task(arith)])

    def refuse(lease, payload):
        raise LeaseExpiredError("lease 100 is expired; the result was not counted")

    client.submit = refuse
    outcome = make_runner(client).run_once()
    assert outcome.status == "abandoned"
    assert not outcome.ok
    assert client.released == []  # it is gone already


def test_a_refused_submission_releases_the_lease_at_once(arith):
    stop = threading.Event()
    client = FakeClient([make_task(arith), make_task(arith, 2, seed="t")], when_empty=stop.set)
    answers = [InvalidSubmissionError("n does not match the task"), None]

    def submit(lease, payload):
        client.submitted.append((lease.lease_id, payload.model_dump(mode="json")))
        error = answers.pop(0)
        if error is not None:
            raise error
        return receipt(lease, duplicate=False, task_status="PENDING")

    client.submit = submit
    runner = make_runner(client)
    first = runner.run_once()
    assert first.status == "rejected" and not first.ends_runner
    assert "n does not match the task" in first.detail
    assert client.released == [100], "the slot reopens now, not when the lease expires"
    assert runner.run_forever(stop) == 1  # the loop goes on


def test_a_refused_signature_releases_and_stops_the_runner(arith):
    client = FakeClient([make_task(arith), make_task(arith, 2, seed="t")])

    def refuse(lease, payload):
        raise SignatureError("key 0123… is not a key of the runner that holds lease 100")

    client.submit = refuse
    with pytest.raises(RunnerSetupError, match="refuses this runner's results"):
        make_runner(client).run_forever(threading.Event())
    assert client.released == [100]
    assert len(client.pulled) == 1


def test_a_protocol_refused_at_submit_releases_and_stops_the_runner(arith):
    """The server was upgraded while the task ran: its refusal ends the runner with the
    server's own words (which say how to upgrade), not a hint about tokens and keys."""
    client = FakeClient([make_task(arith), make_task(arith, 2, seed="t")])
    said = "this server accepts runner protocol 2.0; this runner speaks 1.0: upgrade"

    def refuse(lease, payload):
        raise UnsupportedProtocolError(said, "1.0", "2.0")

    client.submit = refuse
    with pytest.raises(UnsupportedProtocolError) as caught:
        make_runner(client).run_forever(threading.Event())
    assert caught.value.message == said
    assert client.released == [100]
    assert len(client.pulled) == 1


def test_models_and_benchmarks_are_loaded_once(arith):
    client = FakeClient([make_task(arith, 1), make_task(arith, 2, seed="t")])
    runner = make_runner(client)
    assert runner.run_once().status == "submitted"
    assert runner.run_once().status == "submitted"
    assert runner.loads == [MODEL]


def test_the_least_recently_used_model_is_closed():
    backends = {}

    def loader(ref, options):
        backends[ref] = MockBackend()
        return backends[ref]

    evaluator = TaskEvaluator(backend_loader=loader, max_models=2)
    evaluator.backend("a")
    evaluator.backend("b")
    evaluator.backend("a")
    evaluator.backend("c")  # evicts b, the least recently used
    assert backends["b"].closed and not backends["a"].closed
    evaluator.close()
    assert all(b.closed for b in backends.values())


def test_no_work_backs_off_and_server_outages_do_not_end_the_loop(arith):
    stop = threading.Event()
    script = [ServerUnavailableError("cannot reach the server"), make_task(arith)]
    client = FakeClient(script, when_empty=stop.set)
    assert make_runner(client).run_forever(stop) == 1


def test_a_bad_token_ends_the_loop():
    client = FakeClient([AuthenticationError("unknown token")])
    with pytest.raises(AuthenticationError):
        make_runner(client).run_forever(threading.Event())


def test_result_payload_maps_the_run(arith):
    from quorumbench.evaluation.engine import EvalConfig, evaluate

    result = evaluate(arith, MockBackend(lambda p: "#### 1"), EvalConfig(n=2, seed="p"))
    payload = result_payload(9, result).model_dump(mode="json")
    assert payload["sample_ids"] == [s.id for s in result.samples]
    assert payload["sample_scores"] == [s.score for s in result.samples]
    assert payload["sample_output_hashes"] == [s.output_sha256 for s in result.samples]
    assert payload["outputs_sha256"] == result.outputs_sha256
    assert payload["sample_predictions"] == ["1", "1"]
    assert payload["predictions_sha256"] == result.predictions_sha256


@pytest.fixture
def server(monkeypatch):
    """The server build_runner talks to: a FakeClient (alice's token, pull and submit)."""
    client = FakeClient([])
    monkeypatch.setattr("quorumbench.runner.loop.ServerClient", lambda *a, **k: client)
    return client


@pytest.fixture
def key_file(tmp_path, monkeypatch, server):
    """A registered runner signing key where the runner looks for it by default."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = create_key(key_file_for("http://127.0.0.1:1", "alice", "r1"))
    server.key_ids = [key.key_id]
    return key.path


def test_build_runner_needs_a_token(key_file):
    with pytest.raises(ConfigError, match="QB_RUNNER_TOKEN"):
        build_runner(RunnerSettings(_env_file=None, server_url="http://127.0.0.1:1"))
    settings = RunnerSettings(
        _env_file=None,
        server_url="http://127.0.0.1:1",
        token=SecretStr("qb_x"),
        name="r1",
        sandbox="none",
    )
    with build_runner(settings) as runner:
        assert runner.client.key is not None and runner.client.key.path == key_file
        assert runner.identity is not None and runner.identity.account == "alice"
        assert "qb_x" not in repr(settings)


def test_build_runner_needs_a_signing_key(tmp_path, monkeypatch, server):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty"))
    settings = RunnerSettings(
        _env_file=None,
        server_url="http://127.0.0.1:1",
        token=SecretStr("qb_x"),
        name="r1",
        sandbox="none",
    )
    with pytest.raises(ConfigError, match="quorumbench runner init --server http://127.0.0.1:1"):
        build_runner(settings)


def test_a_key_file_others_can_read_is_refused(key_file):
    key_file.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_key(key_file)


def test_the_openai_key_reaches_the_backends_and_stays_masked(monkeypatch, key_file):
    monkeypatch.setenv("QB_RUNNER_OPENAI_API_KEY", "sk-secret-123")
    settings = RunnerSettings(
        _env_file=None,
        server_url="http://127.0.0.1:1",
        token=SecretStr("qb_x"),
        name="r1",
        sandbox="none",
    )
    assert "sk-secret-123" not in repr(settings)
    with build_runner(settings) as runner:
        evaluator = runner.evaluator
        assert isinstance(evaluator, TaskEvaluator)
        assert evaluator.options.api_key is not None
        assert evaluator.options.api_key.get_secret_value() == "sk-secret-123"


def test_runner_settings_describe_every_field():
    for name, field in RunnerSettings.model_fields.items():
        assert field.description, name


class TestCommandLine:
    """``quorumbench runner start`` wiring (the server is a fake client)."""

    @staticmethod
    def invoke(args, monkeypatch, client=None, env=None):
        from typer.testing import CliRunner

        from quorumbench.cli.app import app

        # a private key: removed once the command has run (it is read only then)
        with tempfile.TemporaryDirectory(prefix="qb-runner-key-") as key_dir:
            key = create_key(Path(key_dir) / "runner.key")
            if client is not None:
                client.key_ids = [key.key_id]
                monkeypatch.setattr(
                    "quorumbench.runner.loop.ServerClient", lambda *a, **k: client, raising=True
                )
            for var in [v for v in os.environ if v.startswith("QB_RUNNER_")]:
                monkeypatch.delenv(var, raising=False)
            monkeypatch.setenv("QB_RUNNER_KEY_FILE", str(key.path))
            monkeypatch.setenv("QB_RUNNER_SANDBOX", "none")
            monkeypatch.chdir(Path(__file__).parent)  # no .env here
            return CliRunner().invoke(app, ["runner", "start", *args], env=env)

    def test_once_with_no_work_exits_zero_and_says_so(self, monkeypatch):
        result = self.invoke(["--token", "qb_secret_value", "--once"], monkeypatch, FakeClient([]))
        assert result.exit_code == 0, result.output
        assert "no task available" in result.output
        assert "qb_secret_value" not in result.output

    def test_a_missing_token_is_one_clear_line(self, monkeypatch):
        result = self.invoke(["--once"], monkeypatch)
        assert result.exit_code == 1
        assert "error: no API token" in result.output

    def test_once_and_auto_exclude_each_other(self, monkeypatch):
        result = self.invoke(["--token", "qb_x", "--once", "--auto"], monkeypatch)
        assert result.exit_code == 2

    def test_a_bad_runner_name_is_refused(self, monkeypatch):
        result = self.invoke(["--token", "qb_x", "--name", "bad name!", "--once"], monkeypatch)
        assert result.exit_code == 1
        assert "invalid runner settings: name" in result.output


def test_an_unreachable_server_at_submit_gets_the_same_payload_again(arith):
    client = FakeClient([make_task(arith)])
    sent = []

    def flaky(lease, payload):
        sent.append(payload)
        if len(sent) < 3:
            raise ServerUnavailableError("cannot reach the server")
        return receipt(lease, duplicate=len(sent) > 1, task_status="PENDING")

    client.submit = flaky
    outcome = make_runner(client).run_once()
    assert outcome.status == "duplicate"
    assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
    assert client.released == []


def test_submission_gives_up_when_the_lease_has_run_out(arith):
    client = FakeClient([make_task(arith)], ttl_s=0.0)

    def down(lease, payload):
        raise ServerUnavailableError("cannot reach the server")

    client.submit = down
    outcome = make_runner(client).run_once()
    assert outcome.status == "failed"
    assert "could not submit" in outcome.detail


@pytest.mark.parametrize(
    ("busy", "said", "not_said"),
    [
        (False, "stopping", "the current task is released"),
        (True, "stopping: the current task is released", None),
    ],
)
def test_ctrl_c_says_a_task_is_released_only_when_one_runs(caplog, busy, said, not_said):
    stop = threading.Event()
    with (
        caplog.at_level(logging.WARNING, "quorumbench.runner"),
        stop_on_signals(stop, lambda: busy),
    ):
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
    assert said in caplog.text
    if not_said:
        assert not_said not in caplog.text


def test_progress_is_logged_in_lines_off_a_terminal(arith, caplog):
    import io

    from rich.console import Console

    client = FakeClient([make_task(arith, 12, n=10)])
    runner = make_runner(client)
    runner.console = Console(file=io.StringIO(), force_terminal=False)
    with caplog.at_level(logging.INFO, "quorumbench.runner"):
        assert runner.run_once().status == "submitted"
    lines = [r.getMessage() for r in caplog.records if "samples," in r.getMessage()]
    assert lines and lines[-1].startswith("task 12: 10/10 samples, ")
    assert all(line.startswith("task 12: ") and line.endswith(" s") for line in lines)


class TestCommandLineTasks:
    """``runner start --once`` doing a task (a fake server, the mock model)."""

    @staticmethod
    def invoke(monkeypatch, client, *args, env=None):
        def evaluator(**kwargs):
            kwargs["backend_loader"] = lambda ref, options: MockBackend(lambda p: "#### 4")
            evaluator.made = TaskEvaluator(**kwargs)
            return evaluator.made

        monkeypatch.setattr("quorumbench.runner.loop.TaskEvaluator", evaluator)
        args = ["--token", "qb_x", "--once", *args]
        result = TestCommandLine.invoke(args, monkeypatch, client, env=env)
        return result, evaluator

    def test_a_setup_error_is_one_line_and_exit_one(self, arith, monkeypatch):
        client = FakeClient([make_task(arith, version=arith.version + 1)])
        result, _ = self.invoke(monkeypatch, client)
        assert result.exit_code == 1, result.output
        last = result.output.strip().splitlines()[-1]
        assert last.startswith("error: the task needs arith v")
        assert last.endswith("this runner's quorumbench is out of date, upgrade it")
        assert client.released == [100] and client.failed == []

    def test_progress_lines_when_the_output_is_not_a_terminal(self, arith, monkeypatch):
        client = FakeClient([make_task(arith, 12, n=10)])
        result, _ = self.invoke(monkeypatch, client)
        assert result.exit_code == 0, result.output
        assert "task 12: 10/10 samples, " in result.output

    def test_qb_datasets_dir_is_read_and_the_runners_own_variable_wins(self, tmp_path, monkeypatch):
        (tmp_path / "shared").mkdir()
        (tmp_path / "runner").mkdir()
        shared = {"QB_DATASETS_DIR": str(tmp_path / "shared")}
        _, made = self.invoke(monkeypatch, FakeClient([]), env=shared)
        assert made.made.context.datasets_dir == tmp_path / "shared"
        both = {**shared, "QB_RUNNER_DATASETS_DIR": str(tmp_path / "runner")}
        _, made = self.invoke(monkeypatch, FakeClient([]), env=both)
        assert made.made.context.datasets_dir == tmp_path / "runner"
