"""Load test of the coordination server over HTTP, on SQLite and on PostgreSQL.

N simulated runners (evaluation replaced by a fixed answer) pull and submit against
a real server: ``uvicorn`` in its own process, serving ``create_app`` exactly as
``quorumbench serve`` does. Bulk data (10,000 models x 2 benchmarks of leaderboard
rows, 200,000 finished tasks) is seeded with bulk SQL inserts, not over HTTP.

Phases, per backend:

0. baseline: the same runners in a loop on ``GET /v0/health/live`` (no database), the
   ceiling of the HTTP stack and client on this machine;
1. leaderboard: sequential ``GET /v0/leaderboard`` (the default aggregate page, then
   one benchmark's page) with 10,000 models x 2 benchmarks loaded;
2. claim: pull-only (``POST /v0/leases``) with only the pending tasks in the table;
3. submit: each runner submits a valid result (the task's sample ids, a fixed
   answer) and gets its next lease in the same request (``next_pull_key``; a pull
   request only when that comes back empty, or always with ``--separate-pulls``),
   so tasks reach the quorum of 3 accounts and finalize;
4. claim again, with 200,000 finished tasks (and their 600,000 leases) in the tables.

It prints a table of rates, latencies, CPU per request and CPU shares, and ratios
(against the targets, the health baseline and the empty-table claim rate, all from
the same run), then ends with one machine-readable line per backend (on one line)::

    RESULT backend=<sqlite|postgres> submit_per_s=<x> submit_p99_ms=<y>
        claim_per_s=<z> claim_per_s_200k=<w> leaderboard_p99_ms=<v>

Run by hand; see benchmarks/README.md. ``app_factory`` is the uvicorn factory of the
server process (settings from ``QB_*`` variables).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
from nacl.signing import SigningKey
from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy import create_engine, delete, func, insert, select, text, update
from sqlalchemy.engine import Engine, make_url

from quorumbench.core.canonical import predictions_digest, sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.protocol import Hardware, ResultPayload, Task

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/qb_bench"
TARGETS = {
    "postgres": {"submit_per_s": 1000.0},
    "sqlite": {"submit_per_s": 800.0},
}
SUBMIT_P99_MS = 100.0
CLAIM_PER_S = 1000.0
CLAIM_200K_RATIO = 0.5
LEADERBOARD_P99_MS = 20.0
QUORUM = 3
SAMPLES_PER_TASK = 5
CUSTOM_NAME = "load-sums"

# Plain lines (the "[sqlite]" prefixes are not markup); wide tables when piped to a file.
console = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)


def app_factory() -> Any:
    """The server app (uvicorn ``--factory``); settings come from ``QB_*`` variables,
    and it logs as ``quorumbench serve`` does (``QB_LOG_LEVEL``, default info: one line
    per lease and result, into the server's log file)."""
    from quorumbench import logs
    from quorumbench.api.app import create_app
    from quorumbench.settings import ServerSettings

    settings = ServerSettings()  # type: ignore[call-arg]
    _LOGGING.enter_context(logs.configured(settings.log_level, settings.log_format))
    return create_app(settings)


_LOGGING = contextlib.ExitStack()
"""The server process's log configuration, kept for its lifetime."""


# ---------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class Config:
    backends: tuple[str, ...]
    runners: int
    accounts: int
    tasks: int
    duration: float
    warmup: float
    models: int
    history: int
    lb_requests: int
    lb_seconds: float
    pg_url: str
    workers: int
    pull_with_submit: bool
    client: str
    server_app: str
    server_prefix: list[str]
    tmp_root: Path | None
    keep: bool
    seed: int
    quick: bool


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    p.add_argument("--runners", type=int, default=None, help="simulated runners (32; quick 16)")
    p.add_argument(
        "--accounts", type=int, default=8, help="runner accounts; runners are spread over them"
    )
    p.add_argument(
        "--tasks",
        type=int,
        default=None,
        help="pending tasks seeded before each load phase, 3 slots each (15000; quick 2000)",
    )
    p.add_argument(
        "--duration", type=float, default=None, help="measured seconds per load phase (20; 4)"
    )
    p.add_argument("--warmup", type=float, default=None, help="unmeasured seconds first (2; 1)")
    p.add_argument("--models", type=int, default=None, help="models seeded (10000; 1000)")
    p.add_argument(
        "--history",
        type=int,
        default=None,
        help="finished tasks for the 2nd claim phase (200000; 20000)",
    )
    p.add_argument(
        "--lb-requests", type=int, default=None, help="GETs per leaderboard page (300; 40)"
    )
    p.add_argument("--lb-seconds", type=float, default=15.0, help="time cap per leaderboard page")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("QB_BENCH_POSTGRES_URL", DEFAULT_PG_URL),
        help="PostgreSQL URL; the script creates this database and drops it at the end",
    )
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (1)")
    p.add_argument(
        "--separate-pulls",
        action="store_true",
        help="submit phase: pull with its own request instead of next_pull_key on the submit",
    )
    p.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="runner HTTP client: httpx.AsyncClient, or a minimal asyncio HTTP/1.1\n"
        "client that leaves more CPU to the server (default httpx)",
    )
    p.add_argument(
        "--server-app",
        default="server_load:app_factory",
        help="uvicorn factory MODULE:FUNC (e.g. a patched app on PYTHONPATH, to try a change)",
    )
    p.add_argument(
        "--server-prefix",
        default="",
        help="command put before the server's python, e.g. a profiler:\n"
        "'.venv/bin/py-spy record -r 250 -f speedscope -o /tmp/qb.json --'",
    )
    p.add_argument("--tmp-dir", type=Path, default=None, help="where the temp dir goes")
    p.add_argument("--keep", action="store_true", help="keep the temp dir and PG database")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run (~1 min)")
    a = p.parse_args(argv)
    quick = a.quick

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else (small if quick else full)

    backends = ("sqlite", "postgres") if a.backend == "both" else (a.backend,)
    cfg = Config(
        backends=backends,
        runners=pick(a.runners, 32, 16),
        accounts=a.accounts,
        tasks=pick(a.tasks, 15_000, 2_000),
        duration=pick(a.duration, 20.0, 4.0),
        warmup=pick(a.warmup, 2.0, 1.0),
        models=pick(a.models, 10_000, 1_000),
        history=pick(a.history, 200_000, 20_000),
        lb_requests=pick(a.lb_requests, 300, 40),
        lb_seconds=a.lb_seconds,
        pg_url=a.pg_url,
        workers=a.workers,
        pull_with_submit=not a.separate_pulls,
        client=a.client,
        server_app=a.server_app,
        server_prefix=shlex.split(a.server_prefix),
        tmp_root=a.tmp_dir,
        keep=a.keep,
        seed=a.seed,
        quick=quick,
    )
    if cfg.accounts < QUORUM:
        p.error(f"--accounts must be at least the quorum ({QUORUM}) for tasks to finalize")
    if cfg.runners < 1 or cfg.tasks < 1 or cfg.duration <= 0:
        p.error("--runners, --tasks and --duration must be positive")
    return cfg


# ---------------------------------------------------------------------------------
# small helpers


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def fmt(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores, "
        f"{mem:.0f} GiB RAM; Python {platform.python_version()}"
    )


class CpuMeter:
    """CPU seconds of the client, the server process tree, PostgreSQL and the machine."""

    def __init__(self, server_pid: int, pg_engine: Engine | None = None) -> None:
        self.server_pid = server_pid
        self.pg_engine = pg_engine
        self.pg_flush = False
        if pg_engine is not None:
            with pg_engine.connect() as conn:
                version = int(conn.scalar(text("SHOW server_version_num")))
            self.pg_flush = version >= 150000  # pg_stat_force_next_flush()

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        """User + system seconds, with those of its exited (reaped) children."""
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def _proc_tree(self) -> dict[int, float]:
        try:
            root = psutil.Process(self.server_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return {}
        out = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                out[proc.pid] = self._cpu(proc)
        return out

    @classmethod
    def _postgres(cls) -> dict[int, float]:
        """Every postgres process; the postmaster's count includes ended backends."""
        out = {}
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] in ("postgres", "postmaster"):
                with contextlib.suppress(psutil.Error):
                    out[proc.pid] = cls._cpu(proc)
        return out

    def snapshot(self) -> dict[str, Any]:
        me = psutil.Process().cpu_times()
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        db: dict[str, float] = {}
        if self.pg_engine is not None:
            with self.pg_engine.connect() as conn:
                if self.pg_flush:
                    conn.execute(text("SELECT pg_stat_force_next_flush()"))
                row = conn.execute(
                    text(
                        "SELECT sessions, xact_commit, xact_rollback FROM pg_stat_database "
                        "WHERE datname = current_database()"
                    )
                ).one()
            db = {"sessions": row[0], "commits": row[1], "rollbacks": row[2]}
        return {
            "db": db,
            "t": time.perf_counter(),
            "client": me.user + me.system,
            "server": self._proc_tree(),
            "pg": self._postgres(),
            "busy": busy,
        }

    @staticmethod
    def shares(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
        """Seconds of CPU each used between two snapshots, and the wall time."""

        def delta(key: str) -> float:
            # A process that ended in between counts -its start value; its whole time is
            # in its parent's reaped-children count (backends: the postmaster's).
            pids = a[key].keys() | b[key].keys()
            return sum(b[key].get(pid, 0.0) - a[key].get(pid, 0.0) for pid in pids)

        pg = delta("pg")
        used = {
            "wall": b["t"] - a["t"],
            "client": b["client"] - a["client"],
            "server": delta("server"),
            "postgres": pg,
            "busy": b["busy"] - a["busy"],
        }
        used["other"] = max(0.0, used["busy"] - used["client"] - used["server"] - pg)
        for key, value in b["db"].items():
            # PostgreSQL's own counters (this bench's 3 connections add ~1 each per phase)
            used[f"pg_{key}"] = value - a["db"][key]
        return used


# ---------------------------------------------------------------------------------
# the database: create/drop, seed


def write_custom_benchmark(directory: Path) -> Path:
    """A small exact-match custom benchmark (the second benchmark; no network needed)."""
    rows = [
        {"id": f"s{i:04d}", "q": f"What is {i} + {i % 7}?", "a": str(i + i % 7)} for i in range(500)
    ]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (directory / "sums.jsonl").write_bytes(data)
    spec = {
        "name": CUSTOM_NAME,
        "version": 1,
        "format": "exact-match",
        "data": {
            "path": "sums.jsonl",
            "sha256": hashlib.sha256(data).hexdigest(),
            "id_field": "id",
        },
        "prompt": {"version": 1, "template": "Q: {q}\nA:"},
        "answer_field": "a",
        "extract": {"kind": "number"},
        "compare": "number",
        "labels": {"skill": "reasoning", "subject": "science/math"},
    }
    path = directory / "load-sums.json"
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return path


def create_pg_database(url: str) -> Engine:
    """Create the database of ``url`` (dropping a leftover ``qb_bench``); an admin engine."""
    parsed = make_url(url)
    name = parsed.database
    if not name:
        raise SystemExit("--pg-url needs a database name")
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        if exists:
            if name != "qb_bench":
                admin.dispose()
                raise SystemExit(
                    f"database {name!r} exists; the script only creates (and drops) its own "
                    "database: give a new name, or drop it first"
                )
            conn.execute(text('DROP DATABASE "qb_bench" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    return admin


def drop_pg_database(admin: Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def server_env(url: str, data_dir: Path, custom_spec: Path) -> dict[str, str]:
    """The server's settings as ``QB_*`` variables (read by both processes)."""
    return {
        "QB_DATABASE_URL": url,
        "QB_DATA_DIR": str(data_dir),
        "QB_BENCHMARKS": json.dumps(["arith", str(custom_spec)]),
        "QB_QUORUM": str(QUORUM),
        "QB_SAMPLES_PER_TASK": str(SAMPLES_PER_TASK),
        "QB_LEASE_SECONDS": "600",
        # The bench seeds its own tasks; the scheduler must not add an epoch's worth.
        "QB_EPOCH_TASK_BUDGET": "0",
        "QB_QUOTA_EVALUATIONS": "0",
        # Four simulated runners per account write hundreds of times a second each, far
        # above any real account; the limiter stays on (its cost is measured) with a
        # limit they do not reach.
        "QB_WRITE_RATE_LIMIT": "1000000/minute",
    }


@dataclass
class Seeder:
    """Bulk inserts through SQLAlchemy Core (lists of rows, one transaction per batch)."""

    ctx: Any
    rng: random.Random
    model_ids: list[int] = field(default_factory=list)
    bench_ids: list[int] = field(default_factory=list)
    epoch_now: int = 0
    next_pair: int = 0
    next_priority: int = 0
    epochs: set[int] = field(default_factory=set)
    sample_cache: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    sources: dict[int, tuple[str, int, list[str]]] = field(default_factory=dict)
    epoch_seeds: dict[int, str] = field(default_factory=dict)

    @property
    def engine(self) -> Engine:
        return self.ctx.db.write_engine  # type: ignore[no-any-return]

    @property
    def postgres(self) -> bool:
        return self.ctx.db.dialect == "postgresql"  # type: ignore[no-any-return]

    def base(self, n_models: int, n_accounts: int) -> dict[str, str]:
        """Accounts and tokens, models, epochs and the leaderboard; runner tokens by name."""
        from quorumbench.core.leaderboard import Accumulator
        from quorumbench.db.models import Benchmark, Epoch, LeaderboardEntry, Model
        from quorumbench.services.accounts import create_account, issue_token
        from quorumbench.services.leaderboard import entry_values
        from quorumbench.services.scheduler import ensure_epoch

        ctx = self.ctx
        now = ctx.now()
        owner = create_account(ctx, "load-owner")
        tokens = {}
        for i in range(n_accounts):
            name = f"load-acct{i:02d}"
            create_account(ctx, name)
            tokens[name] = issue_token(ctx, name, scopes=("task:pull", "task:submit")).token
        models = [
            {
                "ref": f"hf:load-org/model-{i:05d}@{i:040x}",
                "name": f"model-{i:05d}",
                "owner_id": owner.id,
                "revision": f"{i:040x}",
                "weights_sha256": hashlib.sha256(f"w{i}".encode()).hexdigest(),
                "params": 135_000_000,
                "architecture": "LlamaForCausalLM",
                "context_length": 2048,
                "dtype": "float32",
                "quantization": None,
                "license": "apache-2.0",
                "base_ref": None,
                "details": {},
                "active": True,
                "created_at": now,
            }
            for i in range(n_models)
        ]
        with self.engine.begin() as conn:
            conn.execute(insert(Model.__table__), models)
            self.model_ids = list(conn.scalars(select(Model.id).order_by(Model.id)))
            benches = list(conn.execute(select(Benchmark).where(Benchmark.active)))
        self.bench_ids = sorted(b.id for b in benches)
        # build_context loaded them under their setting (a name, or a custom spec's path).
        by_name = {bench.name: bench for bench in ctx.loaded_benchmarks.values()}
        for b in benches:
            self.sources[b.id] = (
                b.dataset_sha256,
                b.version,
                list(by_name[b.name].sample_ids()),
            )
        epoch = ensure_epoch(ctx, now)
        self.epoch_now = epoch.id
        self.epoch_seeds[epoch.id] = epoch.seed
        self.epochs.add(epoch.id)
        with self.engine.begin() as conn:
            conn.execute(update(Epoch).where(Epoch.id == epoch.id).values(scheduled_at=now))
        entries = []
        for model_id in self.model_ids:
            for bench_id in self.bench_ids:
                n_tasks = self.rng.randint(1, 40)
                n = n_tasks * SAMPLES_PER_TASK
                hits = self.rng.randint(0, n)
                acc = Accumulator(n_tasks, n, float(hits), float(hits), float(hits))
                updated = now - timedelta(seconds=self.rng.randint(0, 86400))
                entries.append(
                    {"model_id": model_id, "benchmark_id": bench_id, **entry_values(acc, updated)}
                )
        with self.engine.begin() as conn:
            conn.execute(insert(LeaderboardEntry.__table__), entries)
        self.analyze()
        return tokens

    def _epoch(self, epoch_id: int) -> None:
        from quorumbench.core.canonical import sha256_hex
        from quorumbench.db.models import Epoch

        if epoch_id in self.epochs:
            return
        seconds = self.ctx.settings.epoch_seconds
        starts = datetime.fromtimestamp(epoch_id * seconds, UTC)
        seed = uuid.UUID(int=self.rng.getrandbits(128)).hex * 2
        with self.engine.begin() as conn:
            conn.execute(
                insert(Epoch.__table__),
                [
                    {
                        "id": epoch_id,
                        "starts_at": starts,
                        "ends_at": starts + timedelta(seconds=seconds),
                        "seed": seed,
                        "seed_commitment": sha256_hex(seed),
                        "scheduled_at": starts,
                    }
                ],
            )
        self.epochs.add(epoch_id)
        self.epoch_seeds[epoch_id] = seed

    def _samples(self, bench_id: int, epoch_id: int) -> list[str]:
        from quorumbench.core.sampling import sample_ids

        key = (bench_id, epoch_id)
        if key not in self.sample_cache:
            dataset, version, candidates = self.sources[bench_id]
            self.sample_cache[key] = sample_ids(
                dataset, version, self.epoch_seeds[epoch_id], SAMPLES_PER_TASK, candidates
            )
        return self.sample_cache[key]

    def _pairs(self, n: int) -> Iterator[tuple[int, int, int]]:
        """``n`` fresh (model, benchmark, epoch) triples: the current epoch, then older ones."""
        per_epoch = len(self.model_ids) * len(self.bench_ids)
        for _ in range(n):
            k = self.next_pair
            self.next_pair += 1
            epoch_id = self.epoch_now - k // per_epoch
            self._epoch(epoch_id)
            rem = k % per_epoch
            yield (
                self.model_ids[rem // len(self.bench_ids)],
                self.bench_ids[rem % len(self.bench_ids)],
                epoch_id,
            )

    def _next_id(self, conn: Any, table: str) -> int:
        return int(conn.scalar(text(f"SELECT COALESCE(MAX(id), 0) FROM {table}"))) + 1

    def _fix_sequence(self, conn: Any, table: str) -> None:
        if self.postgres:
            conn.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                    f"(SELECT MAX(id) FROM {table}))"
                )
            )

    def pending(self, n: int) -> None:
        """``n`` claimable tasks, quorum 3, at the end of the queue order."""
        from quorumbench.db.models import Task

        now = self.ctx.now()
        rows = []
        for model_id, bench_id, epoch_id in self._pairs(n):
            rows.append(
                {
                    "model_id": model_id,
                    "benchmark_id": bench_id,
                    "epoch_id": epoch_id,
                    "n_samples": SAMPLES_PER_TASK,
                    "status": "PENDING",
                    "round": 1,
                    "quorum": QUORUM,
                    "open_slots": QUORUM,
                    "attempts": 0,
                    "sample_ids": self._samples(bench_id, epoch_id),
                    "priority": self.next_priority,
                    "score": None,
                    "created_at": now,
                    "finalized_at": None,
                }
            )
            self.next_priority += 1
        with self.engine.begin() as conn:
            for start in range(0, len(rows), 20_000):
                conn.execute(insert(Task.__table__), rows[start : start + 20_000])
        self.analyze()

    def history(self, n: int) -> None:
        """``n`` finished tasks, each with 3 SUBMITTED leases of runners of 3 accounts."""
        from quorumbench.db.models import Lease, Runner, Task

        now = self.ctx.now()
        pairs = iter(list(self._pairs(n)))  # creates epoch rows first, outside the txn
        with self.engine.begin() as conn:
            by_account: dict[int, list[int]] = {}
            for runner_id, account_id in conn.execute(select(Runner.id, Runner.account_id)):
                by_account.setdefault(account_id, []).append(runner_id)
            accounts = sorted(by_account)
            task_id = self._next_id(conn, "tasks")
            lease_id = self._next_id(conn, "leases")
            batch = 20_000
            done = 0
            while done < n:
                tasks, leases = [], []
                for model_id, bench_id, epoch_id in (
                    next(pairs) for _ in range(min(batch, n - done))
                ):
                    created = now - timedelta(hours=1 + (self.epoch_now - epoch_id))
                    finalized = created + timedelta(minutes=5)
                    tasks.append(
                        {
                            "id": task_id,
                            "model_id": model_id,
                            "benchmark_id": bench_id,
                            "epoch_id": epoch_id,
                            "n_samples": SAMPLES_PER_TASK,
                            "status": "DONE",
                            "round": 1,
                            "quorum": QUORUM,
                            "open_slots": 0,
                            "attempts": QUORUM,
                            "sample_ids": self._samples(bench_id, epoch_id),
                            "priority": -1,
                            "score": 0.6,
                            "created_at": created,
                            "finalized_at": finalized,
                        }
                    )
                    first = task_id % len(accounts)
                    for j in range(QUORUM):
                        account = accounts[(first + j) % len(accounts)]
                        runners = by_account[account]
                        leases.append(
                            {
                                "id": lease_id,
                                "task_id": task_id,
                                "runner_id": runners[task_id % len(runners)],
                                "account_id": account,
                                "attempt": j + 1,
                                "round": 1,
                                "state": "SUBMITTED",
                                "leased_at": created,
                                "expires_at": created + timedelta(minutes=10),
                                "ended_at": finalized,
                                "pull_key": None,
                            }
                        )
                        lease_id += 1
                    task_id += 1
                conn.execute(insert(Task.__table__), tasks)
                conn.execute(insert(Lease.__table__), leases)
                done += len(tasks)
            self._fix_sequence(conn, "tasks")
            self._fix_sequence(conn, "leases")
        self.analyze(vacuum=True)

    def drop_unfinished(self) -> None:
        """Remove every unfinished task with its leases and results (between phases)."""
        from quorumbench.db.models import ConsensusOutcome, Lease, Result, Task

        open_ids = select(Task.id).where(Task.finalized_at.is_(None)).scalar_subquery()
        with self.engine.begin() as conn:
            conn.execute(delete(ConsensusOutcome).where(ConsensusOutcome.task_id.in_(open_ids)))
            conn.execute(delete(Result).where(Result.task_id.in_(open_ids)))
            conn.execute(delete(Lease).where(Lease.task_id.in_(open_ids)))
            conn.execute(delete(Task).where(Task.finalized_at.is_(None)))

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {
                t: int(conn.scalar(text(f"SELECT COUNT(*) FROM {t}")))
                for t in ("tasks", "leases", "results", "leaderboard_entries", "models")
            }

    def finished(self) -> int:
        from quorumbench.db.models import Task

        with self.engine.connect() as conn:
            return int(
                conn.scalar(select(func.count()).select_from(Task).where(Task.status == "DONE"))
            )

    def analyze(self, vacuum: bool = False) -> None:
        """PostgreSQL: refresh planner statistics (and vacuum after the history load), as
        autovacuum would after bulk loads, so it does not start during a measured phase.

        SQLite is left as the server ships it (no ANALYZE, no sqlite_stat1).
        """
        if self.postgres:
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE" if vacuum else "ANALYZE"))


# ---------------------------------------------------------------------------------
# the server process


class Server:
    def __init__(self, cfg: Config, env: dict[str, str], workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        prefix = list(cfg.server_prefix)
        if prefix and "/" in prefix[0] and Path(prefix[0]).exists():
            prefix[0] = str(Path(prefix[0]).resolve())  # the server runs in the temp dir
        command = [
            *prefix,
            sys.executable,
            "-m",
            "uvicorn",
            cfg.server_app,
            "--factory",
            "--app-dir",
            str(BENCH_DIR),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        if cfg.workers > 1:
            command += ["--workers", str(cfg.workers)]
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            command,
            cwd=workdir,  # no stray .env from the caller's directory
            env={**os.environ, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if httpx.get(self.url + "/v0/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready after {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        if not self.log.closed:
            self.log.flush()
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def error_lines(self) -> list[str]:
        if not self.log.closed:
            self.log.flush()
        text_ = self.log_path.read_text(encoding="utf-8", errors="replace")
        return [line for line in text_.splitlines() if "Traceback" in line or "ERROR" in line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGINT)  # our own process group (uvicorn, profiler)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------------
# the simulated runners


@dataclass
class PhaseStats:
    name: str
    window: float = 0.0
    pull_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    claims: int = 0
    pulls: int = 0  # claims made by a pull request (the rest came with a submission)
    empty: int = 0
    accepted: int = 0
    duplicate: int = 0
    finalized: int = 0
    accepted_total: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)

    def error(self, key: str, detail: str) -> None:
        self.errors[key] += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(f"{key}: {detail[:300]}")

    def rate(self, n: int) -> float:
        return n / self.window if self.window else math.nan


def fixed_answer(lease: dict[str, Any], key: SigningKey, pull_next: bool = False) -> bytes:
    """A valid, signed result for ``lease``: the task's sample ids and the same answer
    from every runner, signed as a runner signs it (``core.signing``).

    With ``pull_next`` the submission also asks for the next lease (``next_pull_key``).
    """
    task = lease["task"]
    ids = task["sample_ids"]
    scores = [float(zlib.crc32(sid.encode()) % 2) for sid in ids]
    hashes = [hashlib.sha256(f"answer:{sid}".encode()).hexdigest() for sid in ids]
    result = ResultPayload(
        task_id=task["id"],
        score=sum(scores) / len(scores),
        n=task["n_samples"],
        sample_ids=ids,
        sample_scores=scores,
        sample_output_hashes=hashes,
        outputs_sha256=hashlib.sha256("".join(hashes).encode()).hexdigest(),
        sample_predictions=[int(s) for s in scores],
        predictions_sha256=predictions_digest(int(s) for s in scores),
        runtime_s=0.0,
        hardware=Hardware(device="simulated"),
    )
    signed_at = datetime.now(UTC).isoformat()
    message = message_for_task(
        Task.model_validate(task),
        lease["lease_id"],
        lease["attempt"],
        result_digest(result),
        signed_at,
    )
    body: dict[str, Any] = {
        "attempt": lease["attempt"],
        "result": result.model_dump(mode="json"),
        "signature": {
            "key_id": sha256_hex(bytes(key.verify_key)),
            "signed_at": signed_at,
            "value": key.sign(message).signature.hex(),
        },
    }
    if pull_next:
        body["next_pull_key"] = uuid.uuid4().hex
    return json.dumps(body).encode()


def register_runner_keys(url: str, tokens: dict[str, str], runners: int) -> list[SigningKey]:
    """One signing key per simulated runner, registered as ``quorumbench runner init`` does."""
    accounts = sorted(tokens)
    keys = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(runners):
            key = SigningKey.generate()
            answer = client.post(
                f"/v0/runners/sim-{i:03d}/keys",
                json={"public_key": bytes(key.verify_key).hex()},
                headers={"Authorization": f"Bearer {tokens[accounts[i % len(accounts)]]}"},
            )
            answer.raise_for_status()
            keys.append(key)
    return keys


class HttpxRunnerClient:
    """One simulated runner's connection: an ``httpx.AsyncClient`` (the default)."""

    def __init__(self, url: str, token: str) -> None:
        self._client = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=60.0,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        resp = await self._client.request(method, path, content=body)
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()


class RawRunnerClient:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams (``--client raw``).

    It only speaks what this server answers (Content-Length or chunked bodies) and
    costs the client far less CPU per request than httpx, so more of the machine's two
    cores are left to the server and the database.
    """

    def __init__(self, url: str, token: str) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port or 80
        self._head = (
            f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        )
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        body = body or b""
        self._writer.write(
            f"{method} {path} HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            await self.aclose()
            raise httpx.RemoteProtocolError(f"connection lost: {exc!r}") from exc
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self._reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self._reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            data = b"".join(chunks)
        else:
            data = await self._reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return status, data

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


TRANSPORT_ERRORS = (httpx.HTTPError, OSError, asyncio.IncompleteReadError)


def make_client(kind: str, url: str, token: str) -> HttpxRunnerClient | RawRunnerClient:
    return RawRunnerClient(url, token) if kind == "raw" else HttpxRunnerClient(url, token)


async def run_load(
    url: str,
    tokens: dict[str, str],
    cfg: Config,
    name: str,
    mode: str,
    meter: CpuMeter,
    duration: float | None = None,
    keys: list[SigningKey] | None = None,
) -> PhaseStats:
    """N runners in a closed loop for warmup + duration; only the window is counted.

    ``keys``: the runners' registered signing keys (needed to submit).

    ``mode``: ``health`` (GET /v0/health/live, the HTTP stack's baseline), ``claim``
    (pull only) or ``submit`` (pull, then submit the fixed answer).
    """
    stats = PhaseStats(name)
    accounts = sorted(tokens)
    clients = [
        make_client(cfg.client, url, tokens[accounts[i % len(accounts)]])
        for i in range(cfg.runners)
    ]
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from = start + cfg.warmup
    stop_at = measure_from + (duration or cfg.duration)
    snaps: dict[str, Any] = {}

    def counted(t_end: float) -> bool:
        return measure_from <= t_end <= stop_at

    async def runner(i: int, client: HttpxRunnerClient | RawRunnerClient) -> None:
        rname = f"sim-{i:03d}"
        pull_body = {"runner": rname}
        lease: dict[str, Any] | None = None  # the next lease, from a submit response
        while loop.time() < stop_at:
            if lease is None:
                t0 = loop.time()
                try:
                    if mode == "health":
                        status, data = await client.request("GET", "/v0/health/live")
                    else:
                        pull_body["pull_key"] = uuid.uuid4().hex
                        status, data = await client.request(
                            "POST", "/v0/leases", json.dumps(pull_body).encode()
                        )
                except TRANSPORT_ERRORS as exc:
                    stats.error(f"pull {type(exc).__name__}", str(exc))
                    continue
                t1 = loop.time()
                if status == 204:
                    if counted(t1):
                        stats.empty += 1
                    await asyncio.sleep(0.05)
                    continue
                if status not in (200, 201):
                    stats.error(f"pull HTTP {status}", data.decode(errors="replace"))
                    continue
                if counted(t1):
                    stats.claims += 1
                    stats.pulls += 1
                    stats.pull_ms.append((t1 - t0) * 1000)
                if mode != "submit":
                    continue
                lease = json.loads(data)
            assert lease is not None
            assert keys is not None, "submitting needs the runners' keys"
            body = fixed_answer(lease, keys[i], cfg.pull_with_submit)
            t2 = loop.time()
            try:
                status, data = await client.request(
                    "POST", f"/v0/leases/{lease['lease_id']}/result?runner={rname}", body
                )
            except TRANSPORT_ERRORS as exc:
                stats.error(f"submit {type(exc).__name__}", str(exc))
                lease = None
                continue
            t3 = loop.time()
            lease = None
            if status == 201:
                stats.accepted_total += 1
                answer = json.loads(data)
                lease = answer.get("next")
                if counted(t3):
                    stats.accepted += 1
                    stats.submit_ms.append((t3 - t2) * 1000)
                    if answer["task_status"] == "DONE":
                        stats.finalized += 1
                    if lease is not None:
                        stats.claims += 1
            elif status == 200:
                stats.duplicate += 1
            else:
                stats.error(f"submit HTTP {status}", data.decode(errors="replace"))

    async def snap_at(when: float, key: str) -> None:
        await asyncio.sleep(max(0.0, when - loop.time()))
        snaps[key] = meter.snapshot()

    try:
        await asyncio.gather(
            snap_at(measure_from, "a"),
            snap_at(stop_at, "b"),
            *(runner(i, c) for i, c in enumerate(clients)),
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    stats.window = stop_at - measure_from
    stats.cpu = meter.shares(snaps["a"], snaps["b"])
    return stats


async def run_leaderboard(url: str, cfg: Config, meter: CpuMeter) -> list[PhaseStats]:
    """Sequential GETs (one client, one at a time): the default page, then one benchmark's."""
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        for label, params in (
            ("leaderboard (aggregate)", {}),
            ("leaderboard (benchmark=arith)", {"benchmark": "arith"}),
        ):
            stats = PhaseStats(label)
            for _ in range(3):  # warm-up
                await client.get("/v0/leaderboard", params=params)
            a = meter.snapshot()
            t_start = time.perf_counter()
            total = None
            while (
                len(stats.pull_ms) < cfg.lb_requests
                and time.perf_counter() - t_start < cfg.lb_seconds
            ):
                t0 = time.perf_counter()
                resp = await client.get("/v0/leaderboard", params=params)
                t1 = time.perf_counter()
                if resp.status_code != 200:
                    stats.error(f"HTTP {resp.status_code}", resp.text)
                    continue
                stats.pull_ms.append((t1 - t0) * 1000)
                total = resp.json()["total"]
            stats.window = time.perf_counter() - t_start
            stats.claims = len(stats.pull_ms)
            stats.cpu = meter.shares(a, meter.snapshot())
            stats.cpu["rows_total"] = float(total or 0)
            out.append(stats)
    return out


# ---------------------------------------------------------------------------------
# one backend


@dataclass
class BackendResult:
    backend: str
    phases: dict[str, PhaseStats]
    notes: list[str]
    seconds: float
    seed_seconds: dict[str, float]
    server_errors: list[str]

    def value(self, key: str) -> float:
        p = self.phases
        lb = [p[k] for k in p if k.startswith("leaderboard")]
        return {
            "submit_per_s": p["submit"].rate(p["submit"].accepted),
            "submit_p99_ms": pct(p["submit"].submit_ms, 99),
            "claim_per_s": p["claim"].rate(p["claim"].claims),
            "claim_per_s_200k": p["claim_200k"].rate(p["claim_200k"].claims),
            "leaderboard_p99_ms": max(pct(s.pull_ms, 99) for s in lb),
            "finalized_per_s": p["submit"].rate(p["submit"].finalized),
        }[key]


def run_backend(backend: str, cfg: Config) -> BackendResult:
    from quorumbench.services.wiring import build_context
    from quorumbench.settings import ServerSettings

    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f"qb-load-{backend}-", dir=cfg.tmp_root))
    admin: Engine | None = None
    server: Server | None = None
    ctx = None
    phases: dict[str, PhaseStats] = {}
    notes: list[str] = []
    seeds: dict[str, float] = {}
    errors: list[str] = []
    try:
        if backend == "postgres":
            url = cfg.pg_url
            admin = create_pg_database(url)
        else:
            url = f"sqlite:///{tmp / 'quorumbench.db'}"
        spec = write_custom_benchmark(tmp)
        env = server_env(url, tmp, spec)
        settings = ServerSettings(
            data_dir=tmp,
            database_url=url,
            benchmarks=["arith", str(spec)],
            quorum=QUORUM,
            samples_per_task=SAMPLES_PER_TASK,
            lease_seconds=600,
            epoch_task_budget=0,
            quota_evaluations=0,
        )
        t = time.perf_counter()
        ctx = build_context(settings)  # migrates, registers both benchmarks
        seeder = Seeder(ctx, random.Random(cfg.seed))
        tokens = seeder.base(cfg.models, cfg.accounts)
        seeds["base"] = time.perf_counter() - t
        console.print(
            f"[{backend}] seeded {cfg.models:,} models, {len(seeder.bench_ids)} benchmarks, "
            f"{cfg.models * len(seeder.bench_ids):,} leaderboard rows in {seeds['base']:.1f} s"
        )

        server = Server(cfg, env, tmp)
        server.wait_ready()
        if cfg.workers > 1:
            time.sleep(3.0 * cfg.workers)  # the first worker answered; let the others start
        pg_stats = ctx.db.write_engine if backend == "postgres" else None
        meter = CpuMeter(server.pid, pg_stats)
        keys = register_runner_keys(server.url, tokens, cfg.runners)
        phases["health (baseline)"] = asyncio.run(
            run_load(
                server.url, tokens, cfg, "health (baseline)", "health", meter, cfg.duration / 2
            )
        )

        for stats in asyncio.run(run_leaderboard(server.url, cfg, meter)):
            phases[stats.name] = stats
            console.print(
                f"[{backend}] {stats.name}: {stats.claims} GETs, "
                f"total={int(stats.cpu['rows_total'])} rows, "
                f"p50 {fmt(pct(stats.pull_ms, 50))} ms, p99 {fmt(pct(stats.pull_ms, 99))} ms"
            )

        def load(name: str, mode: str) -> PhaseStats:
            t = time.perf_counter()
            seeder.pending(cfg.tasks)
            seeds[f"pending ({name})"] = time.perf_counter() - t
            stats = asyncio.run(run_load(server.url, tokens, cfg, name, mode, meter, keys=keys))
            phases[name] = stats
            what = (
                f"{stats.rate(stats.accepted):.0f} accepted submissions/s, "
                f"{stats.rate(stats.finalized):.0f} finalized tasks/s"
                if mode == "submit"
                else f"{stats.rate(stats.claims):.0f} claims/s"
            )
            console.print(
                f"[{backend}] {name}: {what}"
                + (f", errors {dict(stats.errors)}" if stats.errors else "")
            )
            if stats.empty:
                notes.append(
                    f"{name}: {stats.empty} pulls found no task (raise --tasks, "
                    f"{cfg.tasks} were seeded)"
                )
            seeder.drop_unfinished()
            return stats

        load("claim", "claim")
        submit_stats = load("submit", "submit")
        done_db = seeder.finished()
        if submit_stats.finalized > done_db:
            notes.append(f"submit: responses said DONE {submit_stats.finalized}, DB has {done_db}")

        t = time.perf_counter()
        seeder.history(cfg.history)
        seeds["history"] = time.perf_counter() - t
        counts = seeder.counts()
        console.print(
            f"[{backend}] seeded {cfg.history:,} finished tasks (+{QUORUM} leases each) in "
            f"{seeds['history']:.1f} s; table sizes {counts}"
        )
        load("claim_200k", "claim")
        finished = seeder.finished()
        phases["claim_200k"].cpu["finished_tasks"] = float(finished)
        notes.append(
            f"finished tasks in the table during claim_200k: {finished:,} "
            f"({cfg.history:,} seeded + {done_db:,} from the submit phase)"
        )
    finally:
        # Each step runs even if an earlier one fails: nothing of this run is left behind.
        with contextlib.ExitStack() as cleanup:
            if cfg.keep:
                cleanup.callback(console.print, f"[{backend}] kept {tmp}")
            else:
                cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
            if admin is not None:
                if cfg.keep:
                    cleanup.callback(admin.dispose)
                else:
                    name = make_url(cfg.pg_url).database or ""
                    cleanup.callback(drop_pg_database, admin, name)
            if ctx is not None:
                cleanup.callback(ctx.close)
            if server is not None:
                server.stop()
                errors = server.error_lines()
                if errors:
                    console.print(f"[{backend}] server log errors; tail:\n{server.tail()}")
    return BackendResult(backend, phases, notes, time.perf_counter() - began, seeds, errors)


# ---------------------------------------------------------------------------------
# report


def report(
    results: list[BackendResult], cfg: Config, started: datetime, load1: float, t0: float
) -> None:
    console.rule("server load")
    console.print(f"date {started:%Y-%m-%d %H:%M} UTC; machine {machine_line()}")
    console.print(
        f"runners {cfg.runners} over {cfg.accounts} accounts (quorum {QUORUM}), "
        f"{cfg.tasks:,} pending tasks per phase, {cfg.duration:.0f} s measured after "
        f"{cfg.warmup:.0f} s warm-up; {cfg.models:,} models x 2 benchmarks; "
        f"{cfg.history:,} finished tasks for claim_200k; uvicorn workers {cfg.workers}; "
        + (
            "submit phase pulls with next_pull_key (one request per result)"
            if cfg.pull_with_submit
            else "submit phase pulls with separate requests"
        )
        + ("; QUICK (smoke sizes, not for the record)" if cfg.quick else "")
    )
    console.print(f"1-min load average before: {load1:.2f}; at end {os.getloadavg()[0]:.2f}")
    for r in results:
        table = Table(title=f"{r.backend}: phases", title_justify="left")
        for col in (
            "phase",
            "ok/s",
            "pull p50",
            "pull p99",
            "submit p50",
            "submit p99",
            "errors",
            "CPU client",
            "CPU server",
            "CPU postgres (all)",
            "CPU other",
            "server ms/req",
            "client ms/req",
            *(("PG xact/req", "PG sessions") if r.backend == "postgres" else ()),
        ):
            table.add_column(col, justify="left" if col in ("phase", "errors") else "right")
        for name, s in r.phases.items():
            wall = s.cpu.get("wall") or 1.0
            if name.startswith("leaderboard"):
                ok = s.claims / s.window if s.window else math.nan
                requests = s.claims
            elif name == "submit":
                ok = s.rate(s.accepted)
                requests = s.pulls + s.accepted
            else:
                ok = s.rate(s.claims)
                requests = s.claims
            per_req = 1000 / requests if requests else math.nan
            pg_cols = (
                (
                    fmt(
                        (s.cpu.get("pg_commits", 0) + s.cpu.get("pg_rollbacks", 0)) * per_req / 1000
                    ),
                    f"{s.cpu.get('pg_sessions', 0):.0f}",
                )
                if r.backend == "postgres"
                else ()
            )

            def share(key: str, s: PhaseStats = s, wall: float = wall) -> str:
                return f"{100 * s.cpu.get(key, 0.0) / wall:.0f}%"

            table.add_row(
                name,
                fmt(ok),
                fmt(pct(s.pull_ms, 50)),
                fmt(pct(s.pull_ms, 99)),
                fmt(pct(s.submit_ms, 50)),
                fmt(pct(s.submit_ms, 99)),
                ", ".join(f"{k} x{v}" for k, v in s.errors.items()) or "0",
                share("client"),
                share("server"),
                share("postgres"),
                share("other"),
                fmt(s.cpu.get("server", 0.0) * per_req, 2),
                fmt(s.cpu.get("client", 0.0) * per_req, 2),
                *pg_cols,
            )
        console.print(table)
        console.print(
            "  times in ms; ok/s = claims/s, accepted submissions/s or GETs/s; CPU as % of "
            "one core (200% = both cores); postgres counts every PostgreSQL process on the "
            "machine, 'other' = all processes outside this benchmark and PostgreSQL; "
            "server/client ms/req = CPU per HTTP request (submit phase: pull requests + "
            "submissions; with next_pull_key most claims come with a submission)"
            + (
                "; PG xact/req = commits + rollbacks per request, PG sessions = connections "
                "PostgreSQL opened in the window"
                if r.backend == "postgres"
                else ""
            )
        )
        health = r.phases["health (baseline)"]
        hrate = health.rate(health.claims)
        submit_phase = r.phases["submit"]
        sub_requests = submit_phase.rate(submit_phase.pulls + submit_phase.accepted)
        console.print(
            f"  baseline GET /v0/health/live: {fmt(hrate)} requests/s with the same runners = the "
            f"HTTP stack's ceiling here; claims reach {r.value('claim_per_s') / hrate:.2f}x "
            f"of it, submit-phase requests {sub_requests / hrate:.2f}x"
        )
        sub = r.phases["submit"]
        console.print(
            f"  submit phase: {sub.accepted:,} accepted in the window ({sub.accepted_total:,} in"
            f" all), {sub.finalized:,} tasks finalized = {fmt(sub.rate(sub.finalized))} "
            f"finalized tasks/s; duplicates {sub.duplicate}"
        )
        tgt = Table(title=f"{r.backend}: targets", title_justify="left")
        for col in ("metric", "measured", "target", "ratio", ""):
            tgt.add_column(col, justify="right" if col not in ("metric", "") else "left")
        claim = r.value("claim_per_s")
        rows = [
            ("submissions/s", r.value("submit_per_s"), TARGETS[r.backend]["submit_per_s"], True),
            ("submit p99 ms", r.value("submit_p99_ms"), SUBMIT_P99_MS, False),
            ("claims/s (pending only)", claim, CLAIM_PER_S, True),
            ("claims/s with 200k finished", r.value("claim_per_s_200k"), CLAIM_PER_S, True),
            (
                "claim_200k / claim (same run)",
                r.value("claim_per_s_200k") / claim if claim else math.nan,
                CLAIM_200K_RATIO,
                True,
            ),
            ("leaderboard GET p99 ms", r.value("leaderboard_p99_ms"), LEADERBOARD_P99_MS, False),
        ]
        for label, measured, target, higher in rows:
            ratio = measured / target
            ok = measured >= target if higher else measured < target
            tgt.add_row(
                label,
                fmt(measured, 2 if "/ claim" in label else 1),
                ("≥ " if higher else "< ") + fmt(target, 2 if target < 1 else 0),
                f"{ratio:.2f}x",
                Text("met", style="green") if ok else Text("MISSED", style="bold red"),
            )
        console.print(tgt)
        console.print(
            "  ratio = measured / target (for latencies below 1 is good); leaderboard p99 is "
            "the worse of the aggregate and per-benchmark pages"
        )
        seeds = ", ".join(f"{k} {v:.1f} s" for k, v in r.seed_seconds.items())
        console.print(f"  seeding: {seeds}; backend total {r.seconds:.0f} s")
        for note in r.notes:
            console.print(f"  note: {note}")
        for name, s in r.phases.items():
            for sample in s.error_samples:
                console.print(f"  error sample ({name}): {sample}")
        if r.server_errors:
            console.print(f"  server log: {len(r.server_errors)} error lines")
    console.print(f"total {time.perf_counter() - t0:.0f} s (both backends, with seeding)")
    for r in results:
        print(
            f"RESULT backend={r.backend} submit_per_s={r.value('submit_per_s'):.1f} "
            f"submit_p99_ms={r.value('submit_p99_ms'):.1f} "
            f"claim_per_s={r.value('claim_per_s'):.1f} "
            f"claim_per_s_200k={r.value('claim_per_s_200k'):.1f} "
            f"leaderboard_p99_ms={r.value('leaderboard_p99_ms'):.1f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    started = datetime.now(UTC)
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    results = [run_backend(backend, cfg) for backend in cfg.backends]
    report(results, cfg, started, load1, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
