"""The volunteer loop: pull a task, evaluate it, submit the result.

One task at a time. While a task runs, a heartbeat thread extends its lease every
third of the lease time; if the server says the lease is gone (409), the work is
abandoned and nothing is submitted. A stop request (Ctrl-C, SIGTERM, or the
``stop_event``) interrupts the evaluation at the next finished batch and releases
the lease. A task the runner cannot do (its quorumbench is out of date, the data
differs, the model does not load) is released at once so another runner takes it,
and the loop goes on with the next task.

Model code runs in a sandboxed worker process (``runner/sandbox.py``,
``runner/worker.py``) unless the runner was started with ``--no-sandbox``. A task
has ``task_time_limit_s`` from its start; past it, or when the worker dies (a
memory or process limit, a crash), the sandbox is killed and the task is
``failed``.

The result payload is built once per task and submitted once; the client's retries
resend the same bytes, which the server recognizes as a duplicate.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from quorumbench.backends import BackendOptions, load_backend
from quorumbench.backends.local import sandboxable
from quorumbench.benchmarks import load_benchmark
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    DataError,
    EvaluationTimeoutError,
    LeaseExpiredError,
    PermissionDeniedError,
    QuorumError,
    SandboxError,
    ServerUnavailableError,
)
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext, Sample
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.results import RunResult
from quorumbench.runner.client import Lease, ServerClient
from quorumbench.runner.keys import default_key_file, load_key
from quorumbench.runner.sandbox import (
    Limits,
    Sandbox,
    default_memory_mb,
    protected_paths,
    resolve_sandbox,
)
from quorumbench.runner.worker import load_sandboxed
from quorumbench.settings import RunnerSettings

log = logging.getLogger("quorumbench.runner")

Status = Literal[
    "no-work", "submitted", "duplicate", "refused", "failed", "abandoned", "rejected", "stopped"
]
MIN_HEARTBEAT_S = 0.5


@dataclass(frozen=True)
class TaskOutcome:
    """What one :meth:`Runner.run_once` did."""

    status: Status
    task_id: int | None = None
    lease_id: int | None = None
    score: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("no-work", "submitted", "duplicate")


class LeaseClient(Protocol):
    """The part of :class:`ServerClient` the loop uses (tests pass a fake)."""

    def pull(self) -> Lease | None: ...

    def heartbeat(self, lease: Lease) -> Lease: ...

    def release(self, lease: Lease) -> None: ...

    def fail(self, lease: Lease, reason: str) -> None: ...

    def submit(self, lease: Lease, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


BackendLoader = Callable[[str, BackendOptions], ModelBackend]
BenchmarkLoader = Callable[[str, BenchmarkContext], Benchmark]


def _load_backend(ref: str, options: BackendOptions) -> ModelBackend:
    return load_backend(ref, options)


def _load_benchmark(name: str, context: BenchmarkContext) -> Benchmark:
    return load_benchmark(name, context)


def _no_watch() -> None:
    pass


def _normalized(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class Prepared:
    """A task checked against this runner's benchmark, ready to evaluate."""

    benchmark: Benchmark
    config: EvalConfig
    model_ref: str
    samples: tuple[Sample, ...]
    """The task's samples, derived and checked against its sample ids."""


class TaskEvaluator:
    """Loads (and caches) benchmarks and models; evaluates exactly a task's samples.

    With a ``sandbox``, a model that runs code on this machine (``hf:``, ``gguf:``,
    ``bundled:``) is fetched here and loaded in a sandboxed worker, one per cached
    model (``runner/worker.py``); ``openai:`` endpoints and the test loaders run in
    this process.
    """

    def __init__(
        self,
        *,
        datasets_dir: Path | None = None,
        options: BackendOptions | None = None,
        batch_size: int = 8,
        max_models: int = 1,
        backend_loader: BackendLoader = _load_backend,
        benchmark_loader: BenchmarkLoader = _load_benchmark,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.context = BenchmarkContext(datasets_dir)
        self.options = options or BackendOptions()
        self.batch_size = batch_size
        self.max_models = max(1, max_models)
        self._load_backend = backend_loader
        self._load_benchmark = benchmark_loader
        self.sandbox = sandbox
        self._backends: OrderedDict[str, ModelBackend] = OrderedDict()
        self._benchmarks: dict[str, Benchmark] = {}

    def benchmark(self, name: str) -> Benchmark:
        if name not in self._benchmarks:
            self._benchmarks[name] = self._load_benchmark(name, self.context)
        return self._benchmarks[name]

    def backend(self, ref: str, watch: Callable[[], None] = _no_watch) -> ModelBackend:
        """The model behind ``ref``, loaded once and kept (least recently used goes).

        ``watch`` is called while a sandboxed model loads; what it raises stops the
        load (and kills the sandbox). A sandboxed model whose worker died is loaded
        again.
        """
        if ref in self._backends:
            if getattr(self._backends[ref], "alive", True):
                self._backends.move_to_end(ref)
                return self._backends[ref]
            self.evict(ref)
        while len(self._backends) >= self.max_models:
            self.evict(next(iter(self._backends)))
        if self.sandbox is not None and sandboxable(ref):
            backend: ModelBackend = load_sandboxed(ref, self.options, self.sandbox, watch)
        else:
            backend = self._load_backend(ref, self.options)
        self._backends[ref] = backend
        return backend

    def evict(self, ref: str) -> None:
        backend = self._backends.pop(ref, None)
        if backend is not None:
            backend.close()

    def prepare(self, task: Mapping[str, Any]) -> Prepared:
        """Check the task against the local benchmark; raise a QuorumError if it differs."""
        try:
            spec = task["benchmark"]
            name, version = str(spec["name"]), int(spec["version"])
            n = int(task["n_samples"])
            wanted = [str(i) for i in task["sample_ids"]]
            commitment = str(task["seed_commitment"])
            ref = str(task["model"]["ref"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"the server sent a task this runner cannot read ({exc!r})") from exc
        bench = self.benchmark(name)
        if bench.version != version or bench.prompt_version != int(spec["prompt_version"]):
            raise ConfigError(
                f"the task needs {name} v{version} (prompt v{spec['prompt_version']}); this "
                f"runner has v{bench.version} (prompt v{bench.prompt_version}): its quorumbench "
                "is out of date, upgrade it"
            )
        if bench.dataset_sha256 != spec["dataset_sha256"]:
            raise DataError(
                f"data mismatch for {name}: the task's data has SHA-256 {spec['dataset_sha256']}, "
                f"this runner's has {bench.dataset_sha256} (check --datasets-dir)"
            )
        if "config" in spec and _normalized(dict(bench.config)) != _normalized(spec["config"]):
            raise ConfigError(
                f"{name} prompt options differ: the task has {spec['config']}, this runner "
                f"{dict(bench.config)}"
            )
        if len(wanted) != n or len(set(wanted)) != n:
            raise DataError(f"the task asks for {n} samples but lists {len(set(wanted))} ids")
        # The epoch's seed is secret until the epoch is over, so the ids cannot be
        # re-derived here; `quorumbench verify` checks them against the revealed seed.
        samples = bench.samples(wanted)  # a DataError for an id the benchmark lacks
        config = EvalConfig(n=n, seed=commitment, batch_size=self.batch_size)
        return Prepared(bench, config, ref, tuple(samples))

    def run(
        self, prepared: Prepared, backend: ModelBackend, progress: Callable[[int], None]
    ) -> RunResult:
        return evaluate(
            prepared.benchmark, backend, prepared.config, progress, samples=prepared.samples
        )

    def close(self) -> None:
        for ref in list(self._backends):
            self.evict(ref)


def result_payload(task_id: int, result: RunResult) -> dict[str, Any]:
    """The ``result`` body of a submission, from an engine run."""
    return {
        "task_id": task_id,
        "score": result.score,
        "n": result.n,
        "sample_ids": [s.id for s in result.samples],
        "sample_scores": [s.score for s in result.samples],
        "sample_output_hashes": [s.output_sha256 for s in result.samples],
        "outputs_sha256": result.outputs_sha256,
        "runtime_s": round(result.runtime_s, 3),
        "hardware": {**result.environment, "device": result.model.get("device")},
        "model_revision": result.model.get("revision"),
    }


class LeaseKeeper(threading.Thread):
    """Heartbeats one lease every third of its remaining time until stopped."""

    def __init__(self, client: LeaseClient, lease: Lease, min_interval_s: float) -> None:
        super().__init__(name=f"quorumbench-heartbeat-{lease.lease_id}", daemon=True)
        self.client = client
        self.lease = lease
        self.min_interval_s = min_interval_s
        self.lost = threading.Event()
        self.reason = ""
        self._stop_requested = threading.Event()

    def _interval(self) -> float:
        return max(self.lease.ttl_s / 3, self.min_interval_s)

    def run(self) -> None:
        while not self._stop_requested.wait(self._interval()):
            try:
                self.lease = self.client.heartbeat(self.lease)
            except LeaseExpiredError as exc:
                self.reason = exc.message
                self.lost.set()
                return
            except QuorumError as exc:  # transient: keep trying while the lease may live
                log.warning("heartbeat of lease %s failed: %s", self.lease.lease_id, exc)

    def stop(self) -> None:
        self._stop_requested.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)


class _Interrupted(Exception):
    def __init__(self, why: Literal["abandoned", "stopped"]) -> None:
        super().__init__(why)
        self.why: Literal["abandoned", "stopped"] = why


class Runner:
    """Pulls, evaluates and submits; see the module docstring."""

    def __init__(
        self,
        client: LeaseClient,
        evaluator: TaskEvaluator,
        *,
        console: Console | None = None,
        min_idle_backoff_s: float = 2.0,
        max_idle_backoff_s: float = 30.0,
        min_heartbeat_s: float = MIN_HEARTBEAT_S,
        task_time_limit_s: float | None = None,
    ) -> None:
        self.client = client
        self.evaluator = evaluator
        self.console = console
        self.min_idle_backoff_s = min_idle_backoff_s
        self.max_idle_backoff_s = max(max_idle_backoff_s, min_idle_backoff_s)
        self.min_heartbeat_s = min_heartbeat_s
        self.task_time_limit_s = task_time_limit_s

    def close(self) -> None:
        self.evaluator.close()
        self.client.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _release(self, lease: Lease) -> None:
        try:
            self.client.release(lease)
        except Exception as exc:  # it expires on its own; nothing else to do
            log.warning("could not release lease %s: %s", lease.lease_id, exc)

    def _fail(self, lease: Lease, reason: str) -> None:
        """Report the task failed here (the server then offers it to other accounts)."""
        try:
            self.client.fail(lease, reason)
        except Exception as exc:  # it expires on its own; nothing else to do
            log.warning("could not report lease %s failed: %s", lease.lease_id, exc)

    def run_once(self, stop_event: threading.Event | None = None) -> TaskOutcome:
        """Pull one task and do it; the outcome says what happened."""
        stop = stop_event or threading.Event()
        if stop.is_set():
            return TaskOutcome("stopped", detail="stop requested before pulling")
        lease = self.client.pull()
        if lease is None:
            return TaskOutcome("no-work", detail="the server has no task for this runner")
        log.info(
            "task %s (lease %s): %s on %s, %s samples",
            lease.task.get("id"),
            lease.lease_id,
            lease.task.get("model", {}).get("ref"),
            lease.task.get("benchmark", {}).get("name"),
            lease.task.get("n_samples"),
        )
        keeper = LeaseKeeper(self.client, lease, self.min_heartbeat_s)
        keeper.start()
        try:
            outcome = self._work(lease, keeper, stop)
        except BaseException:  # KeyboardInterrupt included: give the slot back, re-raise
            keeper.stop()
            self._release(lease)
            raise
        finally:
            keeper.stop()
        log.info(
            "task %s (lease %s): %s%s%s",
            outcome.task_id,
            outcome.lease_id,
            outcome.status,
            "" if outcome.score is None else f", score {outcome.score:.4f}",
            f" ({outcome.detail})" if outcome.detail else "",
        )
        return outcome

    def _work(self, lease: Lease, keeper: LeaseKeeper, stop: threading.Event) -> TaskOutcome:
        ids = {"task_id": lease.task.get("id"), "lease_id": lease.lease_id}
        limit = self.task_time_limit_s
        deadline = None if limit is None else time.monotonic() + limit

        def checkpoint(_: int = 0) -> None:
            if keeper.lost.is_set():
                raise _Interrupted("abandoned")
            if stop.is_set():
                raise _Interrupted("stopped")
            if deadline is not None and time.monotonic() > deadline:
                raise EvaluationTimeoutError(f"the task ran past its time limit ({limit:g} s)")

        stage: Status = "refused"  # until the model is loaded, then "failed"
        try:
            prepared = self.evaluator.prepare(lease.task)
            backend = self.evaluator.backend(prepared.model_ref, checkpoint)
            stage = "failed"
            checkpoint()
            result = self._evaluate(lease, prepared, backend, checkpoint)
            if keeper.lost.is_set():  # finished work is still submitted after a stop request
                raise _Interrupted("abandoned")
        except _Interrupted as interrupted:
            if interrupted.why == "abandoned":
                return TaskOutcome("abandoned", detail=f"lease lost: {keeper.reason}", **ids)
            self._release(lease)
            return TaskOutcome("stopped", detail="stop requested; lease released", **ids)
        except (SandboxError, EvaluationTimeoutError) as exc:  # the model's code failed
            self.evaluator.evict(str(lease.task.get("model", {}).get("ref", "")))
            self._fail(lease, exc.message)
            return TaskOutcome("failed", detail=exc.message, **ids)
        except QuorumError as exc:
            self._fail(lease, exc.message)
            return TaskOutcome(stage, detail=exc.message, **ids)
        except Exception as exc:  # a bug or a crashed backend must not end the loop
            log.exception("task %s failed", ids["task_id"])
            self.evaluator.evict(str(lease.task.get("model", {}).get("ref", "")))
            self._fail(lease, f"{type(exc).__name__}: {exc}")
            return TaskOutcome("failed", detail=f"{type(exc).__name__}: {exc}", **ids)
        return self._submit(lease, result, keeper, stop, ids)

    def _evaluate(
        self,
        lease: Lease,
        prepared: Prepared,
        backend: ModelBackend,
        checkpoint: Callable[[int], None],
    ) -> RunResult:
        if self.console is None:
            return self.evaluator.run(prepared, backend, checkpoint)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as bar:
            label = f"task {lease.task_id} {prepared.benchmark.name} × {prepared.model_ref}"
            bar_task = bar.add_task(label, total=prepared.config.n)

            def progress(k: int) -> None:
                bar.advance(bar_task, k)
                checkpoint(k)

            return self.evaluator.run(prepared, backend, progress)

    def _submit(
        self,
        lease: Lease,
        result: RunResult,
        keeper: LeaseKeeper,
        stop: threading.Event,
        ids: dict[str, Any],
    ) -> TaskOutcome:
        """Submit once; while the server is unreachable and the lease lives, resend it."""
        payload = result_payload(lease.task_id, result)  # built once; every send is the same
        score = result.score
        while True:
            try:
                answer = self.client.submit(lease, payload)
                break
            except LeaseExpiredError as exc:
                return TaskOutcome("abandoned", score=score, detail=exc.message, **ids)
            except ServerUnavailableError as exc:
                alive = datetime.now(UTC) < keeper.lease.expires_at and not keeper.lost.is_set()
                if not alive or stop.is_set():
                    return TaskOutcome(
                        "failed", score=score, detail=f"could not submit: {exc.message}", **ids
                    )
                log.warning("%s; resending the result", exc.message)
                stop.wait(self.min_idle_backoff_s)
            except QuorumError as exc:
                return TaskOutcome("rejected", score=score, detail=exc.message, **ids)
        status: Status = "duplicate" if answer.get("duplicate") else "submitted"
        return TaskOutcome(
            status, score=score, detail=f"task is {answer.get('task_status')}", **ids
        )

    def run_forever(self, stop_event: threading.Event) -> int:
        """Work until ``stop_event`` is set; the number of results submitted."""
        submitted = 0
        wait = self.min_idle_backoff_s
        while not stop_event.is_set():
            try:
                outcome = self.run_once(stop_event)
            except (AuthenticationError, PermissionDeniedError):
                raise  # a bad token or a suspended runner does not heal by waiting
            except ServerUnavailableError as exc:
                log.warning("%s; waiting %.0f s", exc.message, wait)
                outcome = TaskOutcome("no-work", detail=exc.message)
            if outcome.status in ("submitted", "duplicate"):
                submitted += 1
            if outcome.status == "no-work":
                if wait == self.min_idle_backoff_s:
                    log.info(
                        "no work; asking again in %.0f s (up to %.0f s)",
                        wait,
                        self.max_idle_backoff_s,
                    )
                stop_event.wait(wait)
                wait = min(wait * 2, self.max_idle_backoff_s)
            else:
                wait = self.min_idle_backoff_s
        return submitted


def build_runner(settings: RunnerSettings, *, console: Console | None = None) -> Runner:
    """The runner for ``settings``: an HTTP client and an evaluator with empty caches."""
    if settings.token is None:
        raise ConfigError("no API token: pass --token or set QB_RUNNER_TOKEN")
    url = settings.server_url
    if url.startswith("http://") and not url.startswith(
        ("http://127.0.0.1", "http://localhost", "http://[::1]")
    ):
        log.warning("the server URL %s is not HTTPS: the token travels in clear text", url)
    key = load_key(settings.key_file or default_key_file(settings.name))
    limits = Limits(settings.memory_limit_mb or default_memory_mb(), settings.process_limit)
    sandbox = resolve_sandbox(settings.sandbox, limits, protected_paths((key.path,)))
    if sandbox is not None:
        log.info(
            "model code runs in a %s sandbox: no network, %s MB of address space, "
            "%s processes, %g s per task",
            sandbox.tool,
            limits.memory_mb,
            limits.processes,
            settings.task_time_limit_s,
        )
    client = ServerClient(
        url, settings.token, settings.name, timeout_s=settings.request_timeout_s, key=key
    )
    evaluator = TaskEvaluator(
        datasets_dir=settings.datasets_dir,
        options=BackendOptions(
            device=settings.device,
            cache_dir=settings.cache_dir,
            api_key=settings.openai_api_key,
            allow_pickle=settings.allow_pickle,
            trust_remote_code=settings.trust_remote_code,
        ),
        batch_size=settings.batch_size,
        max_models=settings.max_loaded_models,
        sandbox=sandbox,
    )
    return Runner(
        client,
        evaluator,
        console=console,
        min_idle_backoff_s=settings.min_idle_backoff_s,
        max_idle_backoff_s=settings.max_idle_backoff_s,
        task_time_limit_s=settings.task_time_limit_s,
    )


@contextmanager
def stop_on_signals(stop_event: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop_event``; a second SIGINT interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed in the main thread
        return

    def handler(signum: int, _frame: object) -> None:
        if stop_event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning("stopping: the current task is released (Ctrl-C again to force)")
        stop_event.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
