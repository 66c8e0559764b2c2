"""The chaos harness: a ``quorumbench serve`` process, runner processes, the checks.

Everything runs as real OS processes so SIGKILL means what it means in production:
no ``finally``, no atexit, sockets torn down by the kernel, an SQLite or PostgreSQL
transaction cut wherever it was. The world (accounts, tokens, models) is seeded
through the services before the server starts; the server's own scheduler creates
the tasks, one per model in one long epoch.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from hashlib import sha256
from pathlib import Path
from typing import IO, Any, Literal

import httpx
from sqlalchemy import func, select

from quorumbench.benchmarks import load_benchmark
from quorumbench.db.engine import Database, connect
from quorumbench.db.models import (
    Account,
    ConsensusOutcome,
    Epoch,
    LeaderboardEntry,
    Lease,
    Model,
    Result,
    Runner,
    Task,
)
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples
from quorumbench.evaluation.refs import parse_ref
from quorumbench.services.accounts import Principal, create_account, issue_token
from quorumbench.services.model_metadata import ModelMetadata
from quorumbench.services.models import register_model
from quorumbench.services.wiring import build_context
from quorumbench.settings import ServerSettings

from ..ports import free_port

COVERAGE_VARIABLES = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START", "LINECOV_DIR")

RUNNER_SCRIPT = Path(__file__).with_name("chaos_runner.py")
QUORUM = 3
SAMPLES_PER_TASK = 2
LEASE_SECONDS = 5  # the smallest the settings allow: a dead runner's slot comes back soon
EPOCH_SECONDS = 10**9  # one epoch for the whole test: no boundary can add tasks mid-run
WRONG_EVERY = 4  # models whose number is a multiple of this are answered wrongly
SERVER_ENV = {
    "QB_QUORUM": str(QUORUM),
    "QB_SAMPLES_PER_TASK": str(SAMPLES_PER_TASK),
    "QB_LEASE_SECONDS": str(LEASE_SECONDS),
    "QB_EPOCH_SECONDS": str(EPOCH_SECONDS),
    "QB_SCHEDULER_INTERVAL_S": "0.5",
    "QB_BENCHMARKS": '["arith"]',
    "QB_EPOCH_TASK_BUDGET": "1000",
    "QB_QUOTA_EVALUATIONS": "0",
    "QB_REGISTRATIONS_PER_WEEK": "1000",
    "QB_CANARY_RATE": "0",
    "QB_EDGE_EVERY_EPOCHS": "0",  # one scored task per model: no edge tasks
}


def settings_for(data_dir: Path, database_url: str | None) -> ServerSettings:
    """The settings the server process reads from SERVER_ENV (used for seeding)."""
    return ServerSettings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=data_dir,
        database_url=database_url,
        quorum=QUORUM,
        samples_per_task=SAMPLES_PER_TASK,
        lease_seconds=LEASE_SECONDS,
        epoch_seconds=EPOCH_SECONDS,
        benchmarks=["arith"],
        quota_evaluations=0,
        registrations_per_week=1000,
        canary_rate=0.0,
    )


def model_ref(n: int) -> str:
    return f"hf:chaos/model-{n}@{n:040x}"


def _metadata(ref: str) -> ModelMetadata:
    return ModelMetadata(
        ref=parse_ref(ref),
        name=ref.split("@", 1)[0].removeprefix("hf:"),
        params=1000,
        architecture="LlamaForCausalLM",
        context_length=2048,
        dtype="float32",
        quantization=None,
        license="apache-2.0",
        base_ref=None,
        weights_sha256=sha256(ref.encode()).hexdigest(),
        details={},
    )


def untraced_environment() -> dict[str, str]:
    """This process's environment without ``QB_`` settings and without coverage's.

    The chaos processes are not measured: a SIGKILLed process never writes its
    coverage data, and under Python 3.11's tracing the server and runners ran about
    1.5 times as long (a test 31 s against 23 s alone), which moves the moments the
    kills land on. What they run is measured in the runner, server and CLI tests.
    """
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("QB_") and k not in COVERAGE_VARIABLES
    }


@dataclass
class World:
    """What was seeded: the tokens of the runner accounts and the models."""

    settings: ServerSettings
    owner_id: int
    tokens: dict[str, str]
    models: dict[int, int]
    """model id -> model number (the ``n`` of its ref)."""

    @property
    def url(self) -> str:
        return self.settings.sqlalchemy_url


def seed(settings: ServerSettings, n_models: int, accounts: list[str]) -> World:
    """An admin owner with ``n_models`` models, runner accounts with runner tokens."""
    ctx = build_context(settings)
    try:
        owner = create_account(ctx, "owner", is_admin=True)
        principal = Principal(owner.id, owner.name, True, frozenset({"admin"}))
        models = {}
        for n in range(1, n_models + 1):
            model = register_model(ctx, principal, model_ref(n), inspector=_metadata)
            models[model.id] = n
        tokens = {}
        for name in accounts:
            create_account(ctx, name)
            tokens[name] = issue_token(
                ctx, name, scopes=("task:pull", "task:submit"), expires_in=timedelta(days=1)
            ).token
    finally:
        ctx.close()
    return World(settings, owner.id, tokens, models)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    except FileNotFoundError:
        return "(no file)"


class ServerProcess:
    """``quorumbench serve`` in a child process; start, SIGKILL and start again."""

    def __init__(
        self, workdir: Path, world: World, port: int, env: dict[str, str] | None = None
    ) -> None:
        """``env`` adds to (or overrides) SERVER_ENV, e.g. ``QB_QUEUE__BACKEND``."""
        self.workdir = workdir
        self.world = world
        self.port = port
        self.env = {**SERVER_ENV, **(env or {})}
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.starts = 0
        self.kills = 0

    def _command(self) -> list[str]:
        script = Path(sys.executable).with_name("quorumbench")
        base = (
            [str(script)]
            if script.exists()
            else [sys.executable, "-c", "from quorumbench.cli.app import main; main()"]
        )
        command = [*base, "serve", "--port", str(self.port)]
        command += ["--data-dir", str(self.world.settings.data_dir)]
        if self.world.settings.database_url:
            command += ["--database-url", self.world.settings.database_url]
        return command

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until /v0/health answers; retried if the port is still taken."""
        for _ in range(5):
            if self._start(timeout_s):
                return
            time.sleep(0.5)
        raise AssertionError(f"the server could not bind port {self.port}:\n{self.log_tail()}")

    def _start(self, timeout_s: float) -> bool:
        assert self.proc is None
        env = untraced_environment()
        env.update(self.env)
        self.starts += 1
        self.log = open(self.workdir / f"server-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self._command(),
            cwd=self.workdir,  # no stray .env is read
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as http:
            while True:
                if self.proc.poll() is not None:
                    self._reap()
                    if "address already in use" in self.log_tail().lower():
                        return False
                    raise AssertionError(f"the server exited:\n{self.log_tail()}")
                try:
                    if http.get(f"{self.url}/v0/health").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"the server did not start:\n{self.log_tail()}")
                time.sleep(0.05)

    def log_tail(self) -> str:
        return _tail(self.workdir / f"server-{self.starts}.log")

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.wait(timeout=30)
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.kills += 1
        self._reap()

    def stop(self) -> None:
        """A clean stop (SIGTERM, then SIGKILL if it hangs)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reap()


@dataclass
class RunnerProcess:
    slot: str
    incarnation: int
    proc: subprocess.Popen[bytes]
    journal: Path
    log_path: Path
    log: IO[bytes]
    killed: bool = False

    def ready(self) -> bool:
        """The process is in its loop, where a SIGTERM stops it cleanly."""
        try:
            return '"kind": "ready"' in self.journal.read_text(encoding="utf-8")
        except FileNotFoundError:
            return False


@dataclass
class Fleet:
    """Runner processes, one per slot (account + runner name), restartable."""

    workdir: Path
    server_url: str
    tokens: dict[str, str]
    per_account: int
    work_s: float = 0.05
    selection: Path | None = None
    live: dict[str, RunnerProcess] = field(default_factory=dict)
    done: list[RunnerProcess] = field(default_factory=list)
    kills: int = 0

    @property
    def slots(self) -> list[str]:
        return [f"{a}/{a}-box{i}" for a in sorted(self.tokens) for i in range(self.per_account)]

    def spawn(self, slot: str) -> RunnerProcess:
        account, name = slot.split("/")
        incarnation = sum(1 for p in self.done if p.slot == slot) + 1
        stem = self.workdir / f"runner-{name}-{incarnation}"
        env = untraced_environment()
        env["QB_CHAOS_TOKEN"] = self.tokens[account]
        log_path = stem.with_suffix(".log")
        log = open(log_path, "wb")  # noqa: SIM115 - closed when reaped
        command = [sys.executable, str(RUNNER_SCRIPT), "--url", self.server_url]
        command += ["--name", name, "--journal", str(stem.with_suffix(".jsonl"))]
        command += ["--wrong-every", str(WRONG_EVERY), "--work-s", str(self.work_s)]
        if self.selection is not None:
            command += ["--selection", str(self.selection)]
        proc = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        runner = RunnerProcess(slot, incarnation, proc, stem.with_suffix(".jsonl"), log_path, log)
        self.live[slot] = runner
        return runner

    def start(self) -> None:
        for slot in self.slots:
            self.spawn(slot)

    def _retire(self, runner: RunnerProcess) -> None:
        runner.proc.wait(timeout=30)
        runner.log.close()
        self.live.pop(runner.slot, None)
        self.done.append(runner)

    def kill(self, slot: str) -> None:
        """SIGKILL the slot's process and start its replacement (same runner name)."""
        runner = self.live[slot]
        runner.proc.send_signal(signal.SIGKILL)
        runner.killed = True
        self.kills += 1
        self._retire(runner)
        self.spawn(slot)

    def crashed(self) -> list[RunnerProcess]:
        """Processes that exited on their own while they should be working."""
        return [r for r in self.live.values() if r.proc.poll() is not None]

    def stop(self) -> None:
        """SIGTERM every live process (they release their lease) and reap it.

        A replacement that is still starting (importing, registering its key) has not
        installed its SIGTERM handler yet and would die of the signal: each process is
        given time to report ``ready`` (or to exit) first.
        """
        deadline = time.monotonic() + 60
        for runner in self.live.values():
            while runner.proc.poll() is None and not runner.ready():
                assert time.monotonic() < deadline, f"{runner.slot} never got ready"
                time.sleep(0.05)
            if runner.proc.poll() is None:
                runner.proc.terminate()
        for runner in list(self.live.values()):
            try:
                runner.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                runner.proc.kill()
            self._retire(runner)

    def journal(self) -> list[dict[str, Any]]:
        """Every record of every process, with its slot."""
        records = []
        for runner in self.done + list(self.live.values()):
            if not runner.journal.exists():
                continue
            lines = runner.journal.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except ValueError:
                    # only a SIGKILL in the middle of its very last write may tear a line
                    assert runner.killed and i == len(lines) - 1, (runner.journal, line)
                    continue
                records.append({**record, "slot": runner.slot})
        return records

    def unexpected_exits(self) -> list[str]:
        """Processes that were not SIGKILLed and did not exit 0 after SIGTERM."""
        return [
            f"{r.slot}#{r.incarnation} exited {r.proc.returncode}:\n{_tail(r.log_path)}"
            for r in self.done
            if not r.killed and r.proc.returncode != 0
        ]


@contextmanager
def database(url: str) -> Iterator[Database]:
    db = connect(url)
    try:
        yield db
    finally:
        db.dispose()


def progress(db: Database) -> tuple[int, int]:
    """(tasks, finalized tasks)."""
    with db.read() as session:
        total = session.scalar(select(func.count()).select_from(Task)) or 0
        final = (
            session.scalar(
                select(func.count()).select_from(Task).where(Task.finalized_at.is_not(None))
            )
            or 0
        )
    return total, final


def write_selection(db: Database, path: Path) -> Path:
    """The epoch's arith sample ids, derived here with the real function, for the fleet."""
    with db.read() as session:
        seeds = session.scalars(select(Epoch.seed)).all()
    assert len(seeds) == 1, f"{len(seeds)} epochs"
    bench = load_benchmark("arith", BenchmarkContext(None))
    ids = [s.id for s in select_samples(bench, SAMPLES_PER_TASK, seeds[0])]
    preset = {"benchmark": "arith", "n": SAMPLES_PER_TASK, "seed": seeds[0], "ids": ids}
    path.write_text(json.dumps(preset), encoding="utf-8")
    return path


def results_in(db: Database) -> int:
    with db.read() as session:
        return session.scalar(select(func.count()).select_from(Result)) or 0


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    diagnostics: Callable[[], str],
    *,
    tick: Callable[[], None] | None = None,
    poll_s: float = 0.1,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}\n{diagnostics()}"
            )
        if tick is not None:
            tick()
        time.sleep(poll_s)


def describe(db: Database, fleet: Fleet | None = None, server: ServerProcess | None = None) -> str:
    """A dump of where things stand, for a failed wait."""
    lines = []
    with db.read() as session:
        statuses = Counter(session.scalars(select(Task.status)))
        leases = Counter(session.scalars(select(Lease.state)))
        lines.append(f"tasks by status: {dict(statuses)}; leases by state: {dict(leases)}")
        stuck = session.scalars(
            select(Task).where(Task.finalized_at.is_(None)).order_by(Task.id).limit(10)
        ).all()
        for task in stuck:
            n = session.scalar(
                select(func.count()).select_from(Result).where(Result.task_id == task.id)
            )
            active = session.scalars(
                select(Lease).where(Lease.task_id == task.id, Lease.state == "ACTIVE")
            ).all()
            lines.append(
                f"  task {task.id}: {task.status} round {task.round} quorum {task.quorum} "
                f"open_slots {task.open_slots} attempts {task.attempts} results {n} "
                f"active leases {[(lease.id, str(lease.expires_at)) for lease in active]}"
            )
    if fleet is not None:
        lines.append(f"runner kills: {fleet.kills}; live: {sorted(fleet.live)}")
        for runner in list(fleet.live.values())[:3]:
            lines.append(f"--- {runner.slot}#{runner.incarnation} log tail:")
            lines.append(_tail(runner.log_path, 1500))
    if server is not None:
        lines.append(f"server starts {server.starts}, kills {server.kills}; log tail:")
        lines.append(server.log_tail())
    return "\n".join(lines)


def check_leaderboard_api(url: str, world: World) -> None:
    """The public leaderboard shows every model once, with one task and its score."""
    with httpx.Client(base_url=url, timeout=30) as http:
        response = http.get("/v0/leaderboard", params={"benchmark": "arith", "limit": 1000})
    assert response.status_code == 200, response.text
    rows = response.json()["rows"]
    assert sorted(row["model_id"] for row in rows) == sorted(world.models)
    for row in rows:
        expected = 0.0 if world.models[row["model_id"]] % WRONG_EVERY == 0 else 1.0
        assert (row["n_tasks"], row["n_samples"], row["score"]) == (
            1,
            SAMPLES_PER_TASK,
            expected,
        ), row


def check_invariants(db: Database, world: World, journal: list[dict[str, Any]]) -> dict[str, int]:
    """Every task DONE, each counted exactly once, no acknowledged submission lost."""
    n_models = len(world.models)
    with db.read() as session:
        tasks = session.scalars(select(Task).order_by(Task.id)).all()
        results = session.scalars(select(Result).order_by(Result.id)).all()
        leases = {lease.id: lease for lease in session.scalars(select(Lease))}
        outcomes = session.scalars(select(ConsensusOutcome)).all()
        entries = session.scalars(select(LeaderboardEntry)).all()
        runners = session.scalars(select(Runner)).all()
        accounts = {a.id: a.name for a in session.scalars(select(Account))}
        models = {m.id: m for m in session.scalars(select(Model))}

    # every model got exactly one task and every task finished, by agreement
    assert len(tasks) == n_models, f"{len(tasks)} tasks for {n_models} models"
    assert sorted(t.model_id for t in tasks) == sorted(world.models)
    not_done = [(t.id, t.status, t.round) for t in tasks if t.status != "DONE"]
    assert not not_done, f"tasks not DONE: {not_done}"
    assert all(t.finalized_at is not None and t.round == 1 for t in tasks)

    # each task: exactly quorum results, all counted, from distinct non-owner accounts
    by_task: dict[int, list[Result]] = defaultdict(list)
    for result in results:
        by_task[result.task_id].append(result)
    for task in tasks:
        rows = by_task[task.id]
        accounts_of = [r.account_id for r in rows]
        assert len(rows) == QUORUM == task.quorum, (task.id, [(r.id, r.lease_id) for r in rows])
        assert all(r.counted and not r.outlier for r in rows), task.id
        assert len(set(accounts_of)) == QUORUM, (task.id, accounts_of)
        assert world.owner_id not in accounts_of, task.id
        expected = 0.0 if world.models[task.model_id] % WRONG_EVERY == 0 else 1.0
        assert task.score == expected, (task.id, task.score, expected)
        assert all(r.score == expected for r in rows), task.id
    pairs = Counter((r.task_id, r.account_id) for r in results)
    assert max(pairs.values()) == 1, [p for p, n in pairs.items() if n > 1]
    assert len(results) == QUORUM * n_models

    # a result belongs to the one SUBMITTED lease it was sent under
    submitted = {i for i, lease in leases.items() if lease.state == "SUBMITTED"}
    assert {r.lease_id for r in results} == submitted
    for r in results:
        lease = leases[r.lease_id]
        assert (lease.task_id, lease.account_id, lease.runner_id) == (
            r.task_id,
            r.account_id,
            r.runner_id,
        )

    # consensus decided once per task; the leaderboard counted each task once
    assert sorted(o.task_id for o in outcomes) == [t.id for t in tasks]
    assert all(o.status == "DONE" for o in outcomes)
    done_per_pair = Counter((t.model_id, t.benchmark_id) for t in tasks if t.status == "DONE")
    board = {(e.model_id, e.benchmark_id): e for e in entries}
    assert set(board) == set(done_per_pair)
    for pair, n_done in done_per_pair.items():
        entry = board[pair]
        assert entry.n_tasks == n_done, (models[pair[0]].ref, entry.n_tasks, n_done)
        assert entry.n_samples == n_done * SAMPLES_PER_TASK
        expected = 0.0 if world.models[pair[0]] % WRONG_EVERY == 0 else 1.0
        assert entry.score == expected

    # reputation: one agreement per counted result, never one more
    agreements = sum(r.agreements for r in runners)
    assert agreements == len(results), (agreements, len(results))
    assert sum(r.outliers for r in runners) == 0
    assert not any(r.suspended for r in runners)

    # no acknowledged submission lost: each ack names a stored result of its lease
    by_id = {r.id: r for r in results}
    acks = [rec for rec in journal if rec["kind"] == "ack"]
    for ack in acks:
        result = by_id.get(ack["result_id"])
        assert result is not None, f"acknowledged result lost: {ack}"
        assert (result.lease_id, result.task_id) == (ack["lease_id"], ack["task_id"]), ack
        assert leases[ack["lease_id"]].attempt == ack["attempt"], ack
        assert accounts[result.account_id] == ack["slot"].split("/")[0], ack
    first_acks = {a["result_id"] for a in acks if not a["duplicate"]}
    assert len(first_acks) == len([a for a in acks if not a["duplicate"]]), "one result, two acks"
    return {
        "tasks": len(tasks),
        "results": len(results),
        "acks": len(acks),
        "duplicate_acks": sum(1 for a in acks if a["duplicate"]),
        "leases": len(leases),
        "expired_leases": sum(1 for lease in leases.values() if lease.state == "EXPIRED"),
        "released_leases": sum(1 for lease in leases.values() if lease.state == "RELEASED"),
    }


def _prepare(
    workdir: Path,
    database_url: str | None,
    n_models: int,
    accounts: int,
    per_account: int,
    server_env: dict[str, str] | None,
) -> tuple[World, ServerProcess, Fleet]:
    """Seed the world; the server and the fleet are made but not started."""
    settings = settings_for(workdir / "data", database_url)
    world = seed(settings, n_models, [f"acct{i}" for i in range(1, accounts + 1)])
    server = ServerProcess(workdir, world, free_port(), server_env)
    fleet = Fleet(workdir, server.url, world.tokens, per_account)
    return world, server, fleet


def _no_crashes(fleet: Fleet) -> None:
    """Fail at once when a runner process exits without being killed."""
    if fleet.crashed():
        fleet.stop()
        raise AssertionError(
            "runner processes exited on their own:\n" + "\n".join(fleet.unexpected_exits())
        )


def run_chaos(
    workdir: Path,
    database_url: str | None,
    *,
    rng_seed: int,
    n_models: int,
    victim: Literal["runner", "server"],
    kills: int,
    accounts: int,
    per_account: int,
    server_env: dict[str, str] | None = None,
    timeout_s: float = 240,
) -> dict[str, int]:
    """Work every task while SIGKILLing ``victim`` ("runner" or "server") ``kills`` times.

    A kill happens when a seeded random fraction of all results is in, after a short
    random delay: progress, not wall time, paces the chaos, so a slow or busy machine
    sees the same amount of it. A killed runner is replaced at once under the same
    runner name; a killed server is restarted on the same port and database after a
    random pause. Then the invariants are checked; their counts are returned.
    """
    rng = random.Random(rng_seed)
    world, server, fleet = _prepare(
        workdir, database_url, n_models, accounts, per_account, server_env
    )
    total = n_models * QUORUM
    first = 0.02 if victim == "runner" else 0.1
    thresholds = sorted(rng.uniform(first, 0.9) for _ in range(kills))
    try:
        server.start()
        with database(world.url) as db:

            def dump() -> str:
                return describe(db, fleet, server)

            def chaos() -> None:
                _no_crashes(fleet)
                while thresholds and results_in(db) >= thresholds[0] * total:
                    thresholds.pop(0)
                    time.sleep(rng.uniform(0, 0.15 if victim == "runner" else 0.3))
                    if victim == "runner":
                        fleet.kill(rng.choice(sorted(fleet.live)))
                    else:
                        server.kill()
                        time.sleep(rng.uniform(0, 1.5))
                        server.start()

            wait_until(lambda: progress(db)[0] == n_models, 60, "the tasks", dump)
            fleet.selection = write_selection(db, workdir / "selection.json")
            fleet.start()
            wait_until(
                lambda: progress(db)[1] == n_models,
                timeout_s,
                "every task to finalize",
                dump,
                tick=chaos,
                poll_s=0.05,
            )
            fleet.stop()
            check_leaderboard_api(server.url, world)
            stats = check_invariants(db, world, fleet.journal())
        assert not fleet.unexpected_exits(), "\n".join(fleet.unexpected_exits())
        assert not thresholds, f"{len(thresholds)} planned kills did not happen"
        stats.update(runner_kills=fleet.kills, server_kills=server.kills)
        return stats
    finally:
        fleet.stop()
        server.stop()
