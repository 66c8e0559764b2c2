"""The volunteer loop: pull a task, evaluate it, submit the result.

One task at a time. While a task runs, a heartbeat thread extends its lease every
third of the lease time; if the server says the lease is gone (409), the work is
abandoned and nothing is submitted. A stop request (Ctrl-C, SIGTERM, or the
``stop_event``) interrupts the evaluation at the next finished batch and releases
the lease.

Before the first pull, :func:`build_runner` checks the token and the signing key with
the server (``runner/preflight.py``). When a task cannot be done, ``runner/faults.py``
says whose fault it is: this machine's setup (data, a package, an old quorumbench, the
sandbox) releases the lease without a failure and stops the runner with one line
saying what to fix; the model's (it does not load, its sandbox dies, its endpoint is
not allowed or never answers) is reported as the task's failure and the loop goes on.
A submission the server refuses releases the lease at once.

Model code runs in a sandboxed worker process (``runner/sandbox.py``,
``runner/worker.py``) unless the runner was started with ``--no-sandbox``. A task
has ``task_time_limit_s`` from its start; past it, or when the worker dies (a
memory or process limit, a crash), the sandbox is killed and the task is
``failed``. A code benchmark's generated programs run in a fresh sandbox each
(``runner/code_exec.py``), or, with ``--no-sandbox``, in plain subprocesses.

The result payload is built once per task and submitted once; the client's retries
resend the same bytes, which the server recognizes as a duplicate.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, Protocol

import httpx
from rich.console import Console

from quorumbench.backends import BackendOptions, engine_of
from quorumbench.errors import (
    AuthenticationError,
    ConfigError,
    EvaluationTimeoutError,
    LeaseExpiredError,
    PermissionDeniedError,
    QuorumError,
    RateLimitedError,
    SandboxError,
    ServerUnavailableError,
    UnsupportedProtocolError,
)
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.results import RunResult
from quorumbench.protocol import EdgeReport, Hardware, Receipt, ResultPayload
from quorumbench.runner.client import Identity, Lease, ServerClient
from quorumbench.runner.code_exec import code_runner
from quorumbench.runner.edge_task import edge_settings, is_edge, run_edge_task
from quorumbench.runner.evaluator import Prepared, TaskEvaluator
from quorumbench.runner.faults import (
    RunnerSetupError,
    fault_of,
    refusal_ends_runner,
    setup_error,
)
from quorumbench.runner.keys import keys_root
from quorumbench.runner.preflight import preflight
from quorumbench.runner.progress import task_progress
from quorumbench.runner.sandbox import (
    Limits,
    default_memory_mb,
    protected_paths,
    resolve_sandbox,
)
from quorumbench.settings import RunnerSettings

__all__ = [
    "LeaseClient",
    "LeaseKeeper",
    "Prepared",
    "Runner",
    "TaskEvaluator",
    "TaskOutcome",
    "build_runner",
    "fatal_error",
    "result_payload",
    "stop_on_signals",
]

log = logging.getLogger("quorumbench.runner")

Status = Literal[
    "no-work",
    "submitted",
    "duplicate",
    "refused",
    "failed",
    "abandoned",
    "rejected",
    "stopped",
    "setup-error",
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
    error: QuorumError | None = field(default=None, compare=False, repr=False)
    """What went wrong, when something did."""

    @property
    def ok(self) -> bool:
        return self.status in ("no-work", "submitted", "duplicate")

    @property
    def ends_runner(self) -> bool:
        """Whether every further task would end the same way: a setup error here, or a
        refusal of this runner's results (its token or key)."""
        if self.status == "setup-error":
            return True
        return (
            self.status == "rejected" and self.error is not None and refusal_ends_runner(self.error)
        )


class LeaseClient(Protocol):
    """The part of :class:`ServerClient` the loop uses (tests pass a fake)."""

    def pull(self) -> Lease | None: ...

    def heartbeat(self, lease: Lease, within_s: float | None = None) -> Lease: ...

    def release(self, lease: Lease) -> None: ...

    def fail(self, lease: Lease, reason: str) -> None: ...

    def submit(self, lease: Lease, payload: ResultPayload) -> Receipt: ...

    def submit_edge(self, lease: Lease, report: EdgeReport) -> Receipt: ...

    def close(self) -> None: ...


def result_payload(task_id: int, result: RunResult) -> ResultPayload:
    """The ``result`` body of a submission, from an engine run."""
    return ResultPayload(
        task_id=task_id,
        score=result.score,
        n=result.n,
        sample_ids=[s.id for s in result.samples],
        sample_scores=[s.score for s in result.samples],
        sample_output_hashes=[s.output_sha256 for s in result.samples],
        outputs_sha256=result.outputs_sha256,
        sample_predictions=list(result.sample_predictions),
        predictions_sha256=result.predictions_sha256,
        runtime_s=round(result.runtime_s, 3),
        hardware=Hardware.model_validate(
            {**result.environment, "device": result.model.get("device")}
        ),
        model_revision=result.model.get("revision"),
        measurements=result.measurements,
        engine=engine_of(result.model.get("backend")),
    )


class LeaseKeeper(threading.Thread):
    """Heartbeats one lease every third of its remaining time until stopped.

    A heartbeat is retried until the lease's own deadline (the time it had left at the
    last answer), no attempt waiting for an answer past it; after a failed heartbeat the
    next one starts at once, not a third of the lease later. The lease is lost only
    when the server says so (409), so a slow or briefly unreachable server costs no work.
    """

    def __init__(self, client: LeaseClient, lease: Lease, min_interval_s: float) -> None:
        super().__init__(name=f"quorumbench-heartbeat-{lease.lease_id}", daemon=True)
        self.client = client
        self.lease = lease
        self.min_interval_s = min_interval_s
        self.lost = threading.Event()
        self.reason = ""
        self._stop_requested = threading.Event()
        self._deadline = time.monotonic() + lease.ttl_s
        """When the lease ends unless extended, by this machine's clock."""

    def _interval(self) -> float:
        return max(self.lease.ttl_s / 3, self.min_interval_s)

    def run(self) -> None:
        wait = self._interval()
        while not self._stop_requested.wait(wait):
            within = max(self._deadline - time.monotonic(), self.min_interval_s)
            try:
                self.lease = self.client.heartbeat(self.lease, within_s=within)
            except LeaseExpiredError as exc:
                self.reason = exc.message
                self.lost.set()
                return
            except QuorumError as exc:  # transient: keep trying while the lease may live
                log.warning(
                    "heartbeat of lease %s failed: %s; trying again", self.lease.lease_id, exc
                )
                # at once while the lease may live; past its deadline only to hear whether
                # the server kept it (it answers 409 when not)
                live = time.monotonic() < self._deadline
                wait = self.min_interval_s if live else self._interval()
                continue
            self._deadline = time.monotonic() + self.lease.ttl_s
            wait = self._interval()

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
        self.identity: Identity | None = None
        """Who this runner is on the server (set by :func:`build_runner`'s pre-flight)."""
        self.busy = threading.Event()
        """Set while a task is leased: a stop request then releases it."""

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
            lease.task.id,
            lease.lease_id,
            lease.task.model.ref,
            lease.task.benchmark.name,
            lease.task.n_samples,
        )
        self.busy.set()
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
            self.busy.clear()
        detail = outcome.detail
        if outcome.status == "setup-error":  # the runner's last line says it in full
            detail = "released; this runner cannot do it as it is set up"
        log.info(
            "task %s (lease %s): %s%s%s",
            outcome.task_id,
            outcome.lease_id,
            outcome.status,
            "" if outcome.score is None else f", score {outcome.score:.4f}",
            f" ({detail})" if detail else "",
        )
        return outcome

    def _work(self, lease: Lease, keeper: LeaseKeeper, stop: threading.Event) -> TaskOutcome:
        ids: dict[str, Any] = {"task_id": lease.task.id, "lease_id": lease.lease_id}
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
        send: Callable[[], Receipt]
        score: float | None = None
        try:
            if is_edge(lease.task):
                settings = edge_settings(lease.task)
                backend = self.evaluator.backend(
                    lease.task.model.ref, checkpoint, lease.task.model.engine
                )
                stage = "failed"
                checkpoint()
                report = run_edge_task(lease.task, settings, backend, checkpoint, self.console)
                send = partial(self.client.submit_edge, lease, report)
            else:
                prepared = self.evaluator.prepare(lease.task)
                backend = self.evaluator.backend(
                    prepared.model_ref, checkpoint, lease.task.model.engine
                )
                stage = "failed"
                checkpoint()
                result = self._evaluate(lease, prepared, backend, checkpoint)
                # built once: every send of it is the same
                send = partial(self.client.submit, lease, result_payload(lease.task_id, result))
                score = result.score
            if keeper.lost.is_set():  # finished work is still submitted after a stop request
                raise _Interrupted("abandoned")
        except _Interrupted as interrupted:
            if interrupted.why == "abandoned":
                return TaskOutcome("abandoned", detail=f"lease lost: {keeper.reason}", **ids)
            self._release(lease)
            return TaskOutcome("stopped", detail="stop requested; lease released", **ids)
        except QuorumError as exc:
            if fault_of(exc) == "setup":  # no failure recorded: the task is fine
                error = setup_error(exc, self.evaluator.context.datasets_dir)
                keeper.stop()
                self._release(lease)
                return TaskOutcome("setup-error", detail=error.message, error=error, **ids)
            if isinstance(exc, SandboxError | EvaluationTimeoutError):  # the model's code
                self.evaluator.evict(lease.task.model.ref)
                stage = "failed"
            self._fail(lease, exc.message)
            return TaskOutcome(stage, detail=exc.message, error=exc, **ids)
        except Exception as exc:  # a bug or a crashed backend must not end the loop
            log.exception("task %s failed", ids["task_id"])
            self.evaluator.evict(lease.task.model.ref)
            self._fail(lease, f"{type(exc).__name__}: {exc}")
            return TaskOutcome("failed", detail=f"{type(exc).__name__}: {exc}", **ids)
        return self._submit(send, score, keeper, stop, ids)

    def _evaluate(
        self,
        lease: Lease,
        prepared: Prepared,
        backend: ModelBackend,
        checkpoint: Callable[[int], None],
    ) -> RunResult:
        label = f"task {lease.task_id} {prepared.benchmark.name} × {prepared.model_ref}"
        with task_progress(self.console, lease.task_id, label, prepared.config.n) as advance:

            def progress(k: int) -> None:
                advance(k)
                checkpoint(k)

            return self.evaluator.run(prepared, backend, progress)

    def _submit(
        self,
        send: Callable[[], Receipt],
        score: float | None,
        keeper: LeaseKeeper,
        stop: threading.Event,
        ids: dict[str, Any],
    ) -> TaskOutcome:
        """Submit once; while the server is unreachable and the lease lives, resend it."""
        while True:
            try:
                answer = send()
                break
            except LeaseExpiredError as exc:
                return TaskOutcome("abandoned", score=score, detail=exc.message, **ids)
            except (ServerUnavailableError, RateLimitedError) as exc:
                alive = datetime.now(UTC) < keeper.lease.expires_at and not keeper.lost.is_set()
                if not alive or stop.is_set():
                    return TaskOutcome(
                        "failed", score=score, detail=f"could not submit: {exc.message}", **ids
                    )
                log.warning("%s; resending the result", exc.message)
                stop.wait(self.min_idle_backoff_s)
            except QuorumError as exc:  # refused: give the slot back now, not in 10 minutes
                keeper.stop()
                self._release(keeper.lease)
                detail = f"the server refused the result ({exc.message}); lease released"
                return TaskOutcome("rejected", score=score, detail=detail, error=exc, **ids)
        status: Status = "duplicate" if answer.duplicate else "submitted"
        return TaskOutcome(status, score=score, detail=f"task is {answer.task_status}", **ids)

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
            if outcome.ends_runner:
                raise fatal_error(outcome)
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


def fatal_error(outcome: TaskOutcome) -> QuorumError:
    """The one-line error that ends the runner after ``outcome`` (``ends_runner``)."""
    error = outcome.error or RunnerSetupError(outcome.detail)
    if isinstance(error, UnsupportedProtocolError):  # its message says how to upgrade
        return error
    if outcome.status == "rejected":
        return RunnerSetupError(
            f"the server refuses this runner's results: {error.message} (check its token, "
            "and its key with `quorumbench runner init`)"
        )
    return error


def build_runner(
    settings: RunnerSettings,
    *,
    console: Console | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Runner:
    """The runner for ``settings``: a sandbox, an HTTP client whose token and signing key
    passed the pre-flight (``runner/preflight.py``), and an evaluator with empty caches.

    Nothing is pulled here; what cannot work is refused before the first pull.
    """
    if settings.token is None:
        raise ConfigError("no API token: pass --token or set QB_RUNNER_TOKEN")
    url = settings.server_url
    if url.startswith("http://") and not url.startswith(
        ("http://127.0.0.1", "http://localhost", "http://[::1]")
    ):
        log.warning("the server URL %s is not HTTPS: the token travels in clear text", url)
    keys = (keys_root(),) if settings.key_file is None else (keys_root(), settings.key_file)
    limits = Limits(settings.memory_limit_mb or default_memory_mb(), settings.process_limit)
    sandbox = resolve_sandbox(settings.sandbox, limits, protected_paths(keys))
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
        url,
        settings.token,
        settings.name,
        timeout_s=settings.request_timeout_s,
        transport=transport,
    )
    try:
        ready = preflight(client, settings)
    except BaseException:
        client.close()
        raise
    client.key = ready.key
    evaluator = TaskEvaluator(
        datasets_dir=settings.datasets_dir,
        options=BackendOptions(
            device=settings.device,
            # Every runner computes in float32, whatever its device: results are
            # compared sample by sample, and a GPU in bfloat16 and a CPU in float32
            # disagree on many generated answers (docs/server.md, "Calibrating").
            dtype="float32",
            cache_dir=settings.cache_dir,
            api_key=settings.openai_api_key,
            allow_pickle=settings.allow_pickle,
            trust_remote_code=settings.trust_remote_code,
        ),
        batch_size=settings.batch_size,
        max_models=settings.max_loaded_models,
        sandbox=sandbox,
        allow_private_endpoints=settings.allow_private_endpoints,
        executor=code_runner(sandbox),
        allow_private_data_urls=settings.allow_private_data_urls,
        data_cache_dir=settings.cache_dir / "benchmark-data" if settings.cache_dir else None,
        carbon_intensity=settings.carbon_intensity,
    )
    client.engines = evaluator.engines
    log.info("engines: %s", ", ".join(evaluator.engines))
    runner = Runner(
        client,
        evaluator,
        console=console,
        min_idle_backoff_s=settings.min_idle_backoff_s,
        max_idle_backoff_s=settings.max_idle_backoff_s,
        task_time_limit_s=settings.task_time_limit_s,
    )
    runner.identity = ready.identity
    return runner


@contextmanager
def stop_on_signals(
    stop_event: threading.Event, busy: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop_event``; a second SIGINT interrupts at once.

    ``busy`` says whether a task is leased (then it is released on the way out).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed in the main thread
        return

    def handler(signum: int, _frame: object) -> None:
        if stop_event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if busy():
            log.warning("stopping: the current task is released (Ctrl-C again to force)")
        else:
            log.warning("stopping")
        stop_event.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
