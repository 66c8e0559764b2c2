"""Live evaluation of people's own endpoints: a bounded pool of worker threads in the
server process (``QB_ASK_WORKERS``).

Why threads here and not Celery, RQ or the runner queue: the endpoint's API key may
never be written anywhere (a queue message, the database, a log), so only the process
that received the request can hold it, and only that process can run the ask. A
queue would either carry the key (refused) or run the job without it. Threads of the
server process are enough: a job waits on the network almost all the time (requests
to the endpoint), and ``asyncio`` inside the backend keeps ``QB_ASK_ENDPOINT_
CONCURRENCY`` requests in flight. Idle workers take the next job from the pool's
queue, so a job always goes to a free (the least loaded) worker. When the process
stops, what it held is gone: its unfinished asks fail with "the key was not kept; ask
again" (:func:`fail_abandoned`, at the next start; at once for the jobs still waiting
at a graceful stop).

A job evaluates each endpoint on exactly the plan's labelled samples
(``evaluation/slices.draw_slice``, seeded by the plan's ``versions.seed``), through
the evaluation engine (requests and scoring of each benchmark) and the
OpenAI-compatible backend (retries with backoff, timeouts), over the pinned transport
(``evaluation/endpoints.pinned_transport``: private addresses refused unless
``QB_ASK_ALLOW_PRIVATE_ENDPOINTS``), paced to ``QB_ASK_ENDPOINT_RPS`` per endpoint.
Code benchmarks are left out (they need a sandbox to score). Results go to the ask's
row only: one evaluation, not cross-checked; never the shared cache, the board or the
public log.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx
from pydantic import SecretStr
from sqlalchemy import update

from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends.openai_compat import OpenAICompatBackend
from quorumbench.core.intervals import score_interval
from quorumbench.core.plans import Plan
from quorumbench.db.ask_models import Ask as AskRow
from quorumbench.errors import QuorumError, ServiceUnavailableError
from quorumbench.evaluation.benchmark import Benchmark, Sample
from quorumbench.evaluation.endpoints import pinned_transport
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.refs import parse_ref
from quorumbench.evaluation.slices import draw_slice
from quorumbench.logs import event
from quorumbench.services.benchmarks import list_benchmarks, loaded
from quorumbench.services.context import ServerContext
from quorumbench.services.deepen import plan_seed

log = logging.getLogger("quorumbench.asks")

KEY_NOT_KEPT = "the key was not kept; ask again"
"""The error of an ask whose process stopped before it ended."""
NOT_CROSS_CHECKED = "one evaluation, not cross-checked"
PROGRESS_EVERY_S = 0.5
"""Progress is written to the ask's row at most this often (and when a job ends)."""
MAX_ERROR = 1000
"""Longest error kept per endpoint (characters)."""
STOP_WAIT_S = 10.0
"""How long a graceful stop waits for running jobs to notice it."""


class AskStatus(StrEnum):
    PENDING = "PENDING"
    STARTED = "STARTED"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


UNFINISHED = (AskStatus.PENDING.value, AskStatus.STARTED.value)


@dataclass(frozen=True)
class EndpointRequest:
    """A person's endpoint as their request gives it; the key lives only in memory."""

    url: str
    model: str
    api_key: SecretStr | None = None


@dataclass(frozen=True)
class EndpointRow:
    """One user endpoint's live result: one evaluation, not cross-checked."""

    url: str
    model: str
    status: AskStatus
    n_samples: int
    score: float | None
    ci_low: float | None
    ci_high: float | None
    benchmarks: dict[str, int]
    error: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    """Samples of the slice left out per benchmark (code benchmarks: no sandbox here)."""
    note: str = NOT_CROSS_CHECKED

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "status": self.status.value,
            "n_samples": self.n_samples,
            "score": self.score,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "benchmarks": dict(self.benchmarks),
            "error": self.error,
            "skipped": dict(self.skipped),
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointRow:
        return cls(
            url=data["url"],
            model=data["model"],
            status=AskStatus(data["status"]),
            n_samples=int(data["n_samples"]),
            score=data.get("score"),
            ci_low=data.get("ci_low"),
            ci_high=data.get("ci_high"),
            benchmarks=dict(data.get("benchmarks") or {}),
            error=data.get("error"),
            skipped=dict(data.get("skipped") or {}),
            note=data.get("note") or NOT_CROSS_CHECKED,
        )


@dataclass(frozen=True)
class LiveJob:
    """One ask's live work. Held in memory only: it carries the keys."""

    ask_id: str
    plan: Plan
    endpoints: tuple[EndpointRequest, ...]
    limit: int
    """Samples per endpoint (the plan's budget, capped by ``QB_ASK_MAX_SAMPLES``)."""

    def __repr__(self) -> str:  # never the keys, whatever prints it
        return f"LiveJob(ask_id={self.ask_id!r}, endpoints={len(self.endpoints)})"


class _Stopped(Exception):
    """The job ends early: the server is stopping, or the ask was failed meanwhile."""


class Pace:
    """Spacing of the requests to one endpoint (all asks of this process together)."""

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second if per_second > 0 else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Seconds to wait before sending the next request."""
        if not self._interval:
            return 0.0
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + self._interval
            return at - now


class _PacedTransport(httpx.AsyncBaseTransport):
    """The pinned transport, paced: a fresh one per request, closed once the answer is
    read, so no connection outlives its request (the backend runs each batch on a new
    event loop, and a pooled connection must not outlive its loop)."""

    def __init__(self, make: Callable[[], httpx.AsyncBaseTransport], pace: Pace) -> None:
        self._make = make
        self._pace = pace

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        delay = self._pace.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        inner = self._make()
        try:
            response = await inner.handle_async_request(request)
            try:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        finally:
            await inner.aclose()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(raw),
            request=request,
            extensions=response.extensions,
        )


def _scrub(text: str, keys: Sequence[str]) -> str:
    """``text`` on one line, at most 1000 characters, with the keys, bearer tokens and
    ``sk-`` strings masked (as the backend masks its own messages)."""
    for key in keys:
        text = text.replace(key, "***")
    text = re.sub(r"(?i)bearer\s+\S+", "Bearer ***", text)
    text = re.sub(r"\bsk-[\w-]{4,}", "sk-***", text)
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


class LivePool:
    """``workers`` threads that run live jobs; at most ``max_queued`` jobs held."""

    def __init__(self, ctx: ServerContext, workers: int, max_queued: int) -> None:
        self._ctx = ctx
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="quorumbench-ask")
        self._max_queued = max_queued
        self._jobs: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._paces: dict[str, Pace] = {}
        self._stopping = threading.Event()

    def check_room(self) -> None:
        """ServiceUnavailableError when the pool is full or stopping."""
        with self._lock:
            self._check_room()

    def _check_room(self) -> None:
        if self._stopping.is_set():
            raise ServiceUnavailableError("the server is stopping; ask again in a moment")
        if len(self._jobs) >= self._max_queued:
            raise ServiceUnavailableError(
                f"{len(self._jobs)} asks with endpoints are under way on this server "
                "(the most it holds); ask again when one has ended"
            )

    def submit(self, job: LiveJob) -> None:
        """Queue ``job``; ServiceUnavailableError when the pool is full or stopping."""
        with self._lock:
            self._check_room()
            future = self._executor.submit(self._run, job)
            self._jobs[job.ask_id] = future
        future.add_done_callback(lambda _: self._forget(job.ask_id))

    def _forget(self, ask_id: str) -> None:
        with self._lock:
            self._jobs.pop(ask_id, None)

    def pace(self, url: str) -> Pace:
        with self._lock:
            found = self._paces.get(url)
            if found is None:
                found = self._paces[url] = Pace(self._ctx.settings.ask_endpoint_rps)
            return found

    def shutdown(self) -> None:
        """Stop: waiting jobs fail at once (their keys go with this process), running
        ones stop at their next progress step; wait a little for them."""
        self._stopping.set()
        with self._lock:
            jobs = dict(self._jobs)
        waiting = [ask_id for ask_id, future in jobs.items() if future.cancel()]
        for ask_id in waiting:
            _finish(
                self._ctx, ask_id, AskStatus.FAILURE, None, f"the server stopped; {KEY_NOT_KEPT}"
            )
        running = [f for f in jobs.values() if not f.cancelled()]
        wait_for(running, timeout=STOP_WAIT_S)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- one job -------------------------------------------------------------------

    def _run(self, job: LiveJob) -> None:
        keys = [e.api_key.get_secret_value() for e in job.endpoints if e.api_key]
        try:
            self._evaluate(job)
        except _Stopped:
            _finish(
                self._ctx,
                job.ask_id,
                AskStatus.FAILURE,
                None,
                f"the server stopped; {KEY_NOT_KEPT}",
            )
        except Exception as exc:  # a bug: the ask fails in plain words, no traceback
            why = _scrub(f"{type(exc).__name__}: {exc}", keys)
            event(log, "ask.failed", level=logging.ERROR, ask=job.ask_id, error=why)
            _finish(self._ctx, job.ask_id, AskStatus.FAILURE, None, f"the evaluation failed: {why}")

    def _evaluate(self, job: LiveJob) -> None:
        ctx = self._ctx
        if not _update(
            ctx, job.ask_id, UNFINISHED, status=AskStatus.STARTED.value, started_at=ctx.now()
        ):
            return  # failed meanwhile (a restart elsewhere)
        benchmarks, pillars = active_benchmarks(ctx, job.plan)
        # the seed deepening draws with too: the same samples whatever the endpoints
        drawn = draw_slice(job.plan, benchmarks, pillars, job.limit, plan_seed(job.plan))
        usable: dict[str, list[Sample]] = {}
        skipped: dict[str, int] = {}
        for item in drawn:
            if item.sample.labels.format == "code":
                skipped[item.benchmark.name] = skipped.get(item.benchmark.name, 0) + 1
            else:
                usable.setdefault(item.benchmark.name, []).append(item.sample)
        per_endpoint = sum(len(v) for v in usable.values())
        progress = _Progress(ctx, job.ask_id, per_endpoint * len(job.endpoints), self._stopping)
        progress.flush(force=True)
        rows = [
            self._endpoint(job, endpoint, benchmarks, usable, skipped, progress)
            for endpoint in job.endpoints
        ]
        progress.flush(force=True)
        failed = [r for r in rows if r.status is AskStatus.FAILURE]
        if failed and len(failed) == len(rows):
            error = "; ".join(f"{r.model}: {r.error}" for r in failed)
            _finish(ctx, job.ask_id, AskStatus.FAILURE, rows, error)
        else:
            _finish(ctx, job.ask_id, AskStatus.SUCCESS, rows, None)
        event(log, "ask.done", ask=job.ask_id, endpoints=len(rows), failed=len(failed))

    def _endpoint(
        self,
        job: LiveJob,
        endpoint: EndpointRequest,
        benchmarks: dict[str, Benchmark],
        usable: dict[str, list[Sample]],
        skipped: dict[str, int],
        progress: _Progress,
    ) -> EndpointRow:
        settings = self._ctx.settings
        key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        if not usable:
            why = "the plan's slice has no samples this server can evaluate live"
            if skipped:
                why += " (code benchmarks need a sandbox: not run for endpoints)"
            return _failed(endpoint, why, skipped)
        allow = settings.ask_allow_private_endpoints
        transport = _PacedTransport(
            lambda: pinned_transport(allow_private=allow), self.pace(endpoint.url)
        )
        options = BackendOptions(
            api_key=endpoint.api_key,
            max_concurrency=settings.ask_endpoint_concurrency,
            timeout_s=settings.ask_timeout_s,
            max_retries=settings.ask_retries,
        )
        total = 0.0
        counts: dict[str, int] = {}
        try:
            backend = OpenAICompatBackend(
                parse_ref(f"openai:{endpoint.url}#{endpoint.model}"), options, transport=transport
            )
            for name, samples in usable.items():
                run = evaluate(
                    benchmarks[name],
                    backend,
                    EvalConfig(len(samples), "0", settings.ask_endpoint_concurrency),
                    progress.step,
                    samples,
                )
                total += sum(r.score for r in run.samples)
                counts[name] = len(run.samples)
        except _Stopped:
            raise
        except QuorumError as exc:
            progress.skip(sum(len(v) for v in usable.values()) - sum(counts.values()))
            why = _scrub(exc.message, [key] if key else [])
            event(log, "ask.endpoint_failed", ask=job.ask_id, error=why)
            return _failed(endpoint, why, skipped)
        n = sum(counts.values())
        low, high = score_interval(total, n)
        return EndpointRow(
            endpoint.url,
            endpoint.model,
            AskStatus.SUCCESS,
            n,
            total / n,
            low,
            high,
            counts,
            None,
            skipped,
        )


def _failed(endpoint: EndpointRequest, why: str, skipped: dict[str, int]) -> EndpointRow:
    """The row of an endpoint that could not be evaluated, and why."""
    return EndpointRow(
        endpoint.url, endpoint.model, AskStatus.FAILURE, 0, None, None, None, {}, why, skipped
    )


class _Progress:
    """Done/total of a job, written to its row at most every :data:`PROGRESS_EVERY_S`."""

    def __init__(
        self, ctx: ServerContext, ask_id: str, total: int, stopping: threading.Event
    ) -> None:
        self._ctx = ctx
        self._ask_id = ask_id
        self.total = total
        self.done = 0
        self._stopping = stopping
        self._written = 0.0

    def step(self, n: int) -> None:
        if self._stopping.is_set():
            raise _Stopped
        self.done += n
        self.flush()

    def skip(self, n: int) -> None:
        self.done += max(0, n)

    def flush(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < PROGRESS_EVERY_S:
            return
        self._written = now
        kept = _update(
            self._ctx,
            self._ask_id,
            (AskStatus.STARTED.value,),
            progress_done=self.done,
            progress_total=self.total,
        )
        if not kept:
            raise _Stopped  # failed meanwhile: stop spending the endpoint's time


def active_benchmarks(
    ctx: ServerContext, plan: Plan | None = None
) -> tuple[dict[str, Benchmark], dict[str, str | None]]:
    """The server's active benchmarks and their pillars (loaded, or left out when their
    data cannot be had here); with ``plan``, only those it covers, at the versions it
    was made with."""
    benchmarks: dict[str, Benchmark] = {}
    pillars: dict[str, str | None] = {}
    pinned = plan.versions.get("benchmarks", {}) if plan is not None else {}
    for row in list_benchmarks(ctx):
        if not row.active or pinned.get(row.name, row.version) != row.version:
            continue
        if plan is not None and not plan.covers_benchmark(row.name, row.pillar):
            continue
        try:
            bench = loaded(ctx, row.name, row.version)
        except QuorumError as exc:
            event(log, "ask.benchmark_unavailable", benchmark=row.name, error=exc.message)
            continue
        benchmarks[row.name] = bench
        pillars[row.name] = row.pillar
    return benchmarks, pillars


def _update(ctx: ServerContext, ask_id: str, unless_not: Sequence[str], **values: Any) -> bool:
    """Set ``values`` on the ask if its status is one of ``unless_not``: a failed or
    finished ask is never overwritten. Whether it was."""
    with ctx.db.write() as session:
        done = session.execute(
            update(AskRow)
            .where(AskRow.id == ask_id, AskRow.status.in_(unless_not))
            .values(**values)
        )
        return bool(getattr(done, "rowcount", 0))


def _finish(
    ctx: ServerContext,
    ask_id: str,
    status: AskStatus,
    rows: Sequence[EndpointRow] | None,
    error: str | None,
) -> None:
    values: dict[str, Any] = {
        "status": status.value,
        "error": error[:2000] if error else None,
        "finished_at": ctx.now(),
    }
    if rows is not None:
        values["results"] = [r.as_json() for r in rows]
    _update(ctx, ask_id, UNFINISHED, **values)


def fail(ctx: ServerContext, ask_id: str, error: str) -> None:
    """Fail an unfinished ask with ``error``."""
    _finish(ctx, ask_id, AskStatus.FAILURE, None, error)


_POOL_LOCK = threading.Lock()


def pool_for(ctx: ServerContext) -> LivePool:
    """The context's pool, made on first use (admin contexts never make one)."""
    with _POOL_LOCK:
        if ctx.live is None:
            ctx.live = LivePool(ctx, ctx.settings.ask_workers, ctx.settings.ask_max_queued)
        pool = ctx.live
    assert isinstance(pool, LivePool)
    return pool


def stop_pool(ctx: ServerContext) -> None:
    """Stop the context's pool, if it has one (a graceful stop)."""
    with _POOL_LOCK:
        pool, ctx.live = ctx.live, None
    if pool is not None:
        pool.shutdown()


def fail_abandoned(ctx: ServerContext) -> int:
    """At the server's start: asks left PENDING or STARTED lost their keys with the
    process that held them; they fail with :data:`KEY_NOT_KEPT`. How many."""
    with ctx.db.write() as session:
        done = session.execute(
            update(AskRow)
            .where(AskRow.status.in_(UNFINISHED))
            .values(status=AskStatus.FAILURE.value, error=KEY_NOT_KEPT, finished_at=ctx.now())
        )
        count = int(getattr(done, "rowcount", 0) or 0)
    if count:
        event(log, "asks.abandoned", level=logging.WARNING, failed=count)
    return count
