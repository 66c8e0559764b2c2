"""One chaos runner process: the real ``Runner`` loop with an instant, scripted model.

Run as ``python chaos_runner.py --url URL --name NAME --journal FILE`` with the API
token in ``QB_CHAOS_TOKEN``. The loop is :meth:`Runner.run_forever` over a real
:class:`ServerClient`; only the model is fake: a :class:`MockBackend` that answers
every ``arith`` question correctly for most models and wrongly (``#### -1``) for
those whose number is a multiple of ``--wrong-every``, so every runner agrees and
the expected leaderboard score of each model is known (1.0 or 0.0).

Every acknowledged submission (the server answered 200/201 to the result POST) is
appended to the JSONL journal and fsynced before the loop goes on, so a SIGKILL
can lose at most the record of the ack in flight, never a record the test reads.
Pulled leases are journaled too (kind ``lease``), for the diagnostics.

The process stops on SIGTERM/SIGINT (the lease in hand is released), when the
server has had no work (or was unreachable) for ``--idle-exit-s``, or when its
parent dies, so no orphan outlives a crashed test session.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import generate_item
from quorumbench.errors import LeaseExpiredError, QuorumError, ServerUnavailableError
from quorumbench.evaluation import engine
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.benchmark import Benchmark, Sample
from quorumbench.evaluation.results import RunResult
from quorumbench.protocol import Receipt, ResultPayload
from quorumbench.runner.client import Lease, ServerClient
from quorumbench.runner.keys import create_key
from quorumbench.runner.loop import Prepared, Runner, TaskEvaluator, stop_on_signals

WRONG_ANSWER = "#### -1"
_select_samples = engine.select_samples
PRESET: dict[str, Any] = {}
"""``--selection``: one (benchmark, n, seed) -> ids that the test derived beforehand."""


@lru_cache(maxsize=8)
def _cached_selection(benchmark: Benchmark, n: int, seed: str) -> tuple[Sample, ...]:
    if (benchmark.name, n, seed) == (PRESET.get("benchmark"), PRESET.get("n"), PRESET.get("seed")):
        return tuple(benchmark.samples(PRESET["ids"]))
    return tuple(_select_samples(benchmark, n, seed))


def select_samples(benchmark: Benchmark, n: int, seed: str) -> list[Sample]:
    """``engine.select_samples``, memoized, and preset by the test when it can be.

    Deriving an arith task's ids hashes the whole 100,000-id pool (about 0.5 s of
    CPU) and the loop derives them twice per task. All tasks of the test share one
    epoch, so the test derives the ids once (with the real function) and hands them
    to every runner process; TaskEvaluator.prepare still compares them with the ids
    the server put in each task. On a small CI machine this is what keeps dozens of
    restarted runner processes quick.
    """
    return list(_cached_selection(benchmark, n, seed))


engine.select_samples = select_samples  # evaluate() looks it up in its module


def model_number(ref: str) -> int:
    """The ``n`` of ``hf:chaos/model-<n>@<sha>``."""
    return int(ref.split("@", 1)[0].rsplit("-", 1)[1])


class Journal:
    """Append-only JSONL, each line flushed and fsynced before ``write`` returns."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({**record, "pid": os.getpid(), "t": time.time()}, sort_keys=True)
        with self._lock:
            if self._file.closed:  # a late heartbeat thread after shutdown
                return
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


class JournaledClient:
    """The real client; acks and leases go to the journal, pulls feed the idle clock."""

    def __init__(self, inner: ServerClient, journal: Journal) -> None:
        self.inner = inner
        self.journal = journal
        self.last_work = time.monotonic()

    def pull(self) -> Lease | None:
        lease = self.inner.pull()
        if lease is not None:
            self.last_work = time.monotonic()
            self.journal.write(
                {
                    "kind": "lease",
                    "lease_id": lease.lease_id,
                    "attempt": lease.attempt,
                    "task_id": lease.task_id,
                }
            )
        return lease

    def _refused(self, what: str, lease: Lease, exc: QuorumError) -> None:
        self.journal.write(
            {
                "kind": f"{what}-refused",
                "lease_id": lease.lease_id,
                "attempt": lease.attempt,
                "task_id": lease.task_id,
                "error": exc.code,
            }
        )

    def heartbeat(self, lease: Lease, within_s: float | None = None) -> Lease:
        try:
            return self.inner.heartbeat(lease)
        except LeaseExpiredError as exc:
            self._refused("heartbeat", lease, exc)
            raise

    def release(self, lease: Lease) -> None:
        self.inner.release(lease)

    def fail(self, lease: Lease, reason: str) -> None:
        self.inner.fail(lease, reason)

    def submit(self, lease: Lease, payload: ResultPayload) -> Receipt:
        try:
            answer = self.inner.submit(lease, payload)
        except QuorumError as exc:
            if not isinstance(exc, ServerUnavailableError):
                self._refused("submit", lease, exc)
            raise
        self.last_work = time.monotonic()
        self.journal.write(
            {
                "kind": "ack",
                "lease_id": lease.lease_id,
                "attempt": lease.attempt,
                "task_id": lease.task_id,
                "result_id": answer.result_id,
                "task_status": answer.task_status,
                "duplicate": answer.duplicate,
                "score": payload.score,
            }
        )
        return answer

    def close(self) -> None:
        self.inner.close()


class OracleEvaluator(TaskEvaluator):
    """Knows the gold answers of the task in hand; takes ``work_s`` per task."""

    def __init__(self, wrong_every: int, work_s: float) -> None:
        super().__init__(backend_loader=self._backend, max_models=1)
        self.wrong_every = wrong_every
        self.work_s = work_s
        self.gold: dict[str, str] = {}

    def _backend(self, ref: str, _options: BackendOptions) -> ModelBackend:
        wrong = model_number(ref) % self.wrong_every == 0

        def answer(prompt: str) -> str:
            if wrong:
                return WRONG_ANSWER
            question = prompt.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:").strip()
            return f"#### {self.gold[question]}"

        return MockBackend(answer=answer)

    def run(self, prepared: Prepared, backend: ModelBackend, progress: Any) -> RunResult:
        samples = prepared.samples
        self.gold = {}
        for sample in samples:
            item = generate_item(sample.id)
            self.gold[item.question] = str(item.answer)
        if self.work_s:
            time.sleep(self.work_s)
        return super().run(prepared, backend, progress)


def register_key(server: ServerClient, patience_s: float = 60.0) -> None:
    """Register the runner's key, waiting out a server the chaos test has stopped."""
    assert server.key is not None
    deadline = time.monotonic() + patience_s
    while True:
        try:
            server.register_key(server.key)
            return
        except ServerUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--wrong-every", type=int, default=4)
    parser.add_argument("--work-s", type=float, default=0.05)
    parser.add_argument("--selection", help="JSON {benchmark, n, seed, ids} (see PRESET)")
    parser.add_argument("--idle-exit-s", type=float, default=600.0)
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--max-attempts", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    if args.selection:
        with open(args.selection, encoding="utf-8") as file:
            PRESET.update(json.load(file))
    token = SecretStr(os.environ["QB_CHAOS_TOKEN"])
    parent = os.getppid()
    journal = Journal(args.journal)
    journal.write({"kind": "start", "name": args.name})
    server = ServerClient(
        args.url,
        token,
        args.name,
        timeout_s=args.timeout_s,
        max_attempts=args.max_attempts,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
        key=create_key(Path(f"{args.journal}.key")),  # kept across restarts of this runner
    )
    register_key(server)
    client = JournaledClient(server, journal)
    runner = Runner(
        client,
        OracleEvaluator(args.wrong_every, args.work_s),
        min_idle_backoff_s=0.05,
        max_idle_backoff_s=0.4,
        min_heartbeat_s=0.5,
    )
    stop = threading.Event()

    def watchdog() -> None:
        while not stop.wait(0.25):
            idle = time.monotonic() - client.last_work
            if os.getppid() != parent or idle > args.idle_exit_s:
                stop.set()

    threading.Thread(target=watchdog, name="chaos-watchdog", daemon=True).start()
    try:
        with runner, stop_on_signals(stop):
            # From here a SIGTERM is a clean stop; before it (imports, the key's
            # registration) it kills the process, so the test stops only ready runners.
            journal.write({"kind": "ready"})
            submitted = runner.run_forever(stop)
    finally:
        stop.set()
        journal.close()
    logging.getLogger("quorumbench.chaos").warning("%s: %s results submitted", args.name, submitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
