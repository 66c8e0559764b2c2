"""Web leaderboard pages against the JSON API's indexed read, as the models grow.

For each size N (1,000, 5,000 and 10,000 models by default) the script seeds a fresh
database with bulk SQL inserts: N models of every type (base, LoRA adapters with their
base, GGUF, endpoints), their leaderboard rows on three benchmarks, the maintained
aggregate rows, and a few hundred finished tasks (DONE and DISPUTED, with leases,
results and consensus outcomes). It then times the pages of ``web/routes.py`` through
``fastapi.testclient.TestClient`` on ``create_app`` (no socket, no scheduler): each
request once to warm up, then the median of ``--repeat`` runs. The baseline, measured
in the same run on the same data, is the JSON API's indexed read for the same page
size, ``GET /v0/leaderboard?limit=50``; every page is also given as a ratio to it.

It ends with how each page grows from the smallest N to the largest, and one
machine-readable line per N::

    RESULT n=<N> baseline_ms=<x> home_ms=<y> home_ratio=<y/x> slowest=<path> slowest_ms=<z>

Run by hand; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import json
import math
import os
import platform
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import Engine, make_url

DEFAULT_SIZES = (1_000, 5_000, 10_000)
QUICK_SIZES = (500, 2_000)
SCRATCH_DB = "qb_bench_web"
SAMPLES_PER_TASK = 5
QUORUM = 3
EPOCHS = 8
FEATURED = 3  # base models with a full task history: the model page and the compare page
OTHER_TASKS = 300  # finished tasks spread over other models, 30% DISPUTED
PER_PAGE = 50
BASELINE = f"/v0/leaderboard?limit={PER_PAGE}"
FAMILIES = ("llama", "qwen", "mistral", "gemma", "phi", "smol", "olmo", "falcon")
SIZES = (
    ("135m", 135_000_000),
    ("360m", 360_000_000),
    ("500m", 500_000_000),
    ("1.1b", 1_100_000_000),
    ("1.5b", 1_500_000_000),
    ("3b", 3_000_000_000),
    ("7b", 7_000_000_000),
    ("8b", 8_000_000_000),
    ("13b", 13_000_000_000),
    ("70b", 70_000_000_000),
)
LICENSES = ("apache-2.0", "apache-2.0", "mit", "llama3", "gemma", "other", None)
KIND_CYCLE = ("base",) * 6 + ("lora",) * 2 + ("gguf", "endpoint")
RARE_TAG = "r37x"  # one name in a hundred carries it: the ?q= request (see Seeder.models)

# Plain lines (paths in brackets are not markup); wide tables when piped to a file.
console = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)


# ---------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]
    repeat: int
    database_url: str | None
    memory: bool
    profile: bool
    freeze_gc: bool
    tmp_root: Path | None
    seed: int
    quick: bool


class OneLineParser(argparse.ArgumentParser):
    """Bad flags: one line on stderr and exit status 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give counts, e.g. 1000,5000") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError(f"{value!r}: each size must be at least 100")
    return tuple(sorted(set(sizes)))


def parse_args(argv: list[str] | None = None) -> Config:
    p = OneLineParser(
        prog="web_pages.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        help="comma-separated model counts (1000,5000,10000; --quick 500,2000)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per request (median; 7)")
    p.add_argument(
        "--database-url",
        default=None,
        help="run on PostgreSQL: a URL of any database on the server, e.g.\n"
        "postgresql+psycopg://@127.0.0.1:5432/test; the script creates its own\n"
        f"database {SCRATCH_DB!r} there and drops it after each size (default: SQLite\n"
        "in a temp dir)",
    )
    p.add_argument(
        "--memory", action="store_true", help="peak Python memory of one GET / (tracemalloc)"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="cProfile of the / handler in process at each size (top functions)",
    )
    p.add_argument(
        "--freeze-gc",
        action="store_true",
        help="gc.freeze() the heap before measuring: full collections then scan only\n"
        "what the requests allocate (default: the collector as a server runs it)",
    )
    p.add_argument("--tmp-dir", type=Path, default=None, help="where the temp dirs go")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    a = p.parse_args(argv)
    if a.quick and a.sizes is not None:
        p.error("--quick and --sizes: give one of them")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.database_url is not None:
        try:
            url = make_url(a.database_url)
        except Exception as exc:  # sqlalchemy.exc.ArgumentError and friends
            p.error(f"--database-url {a.database_url!r}: {exc}")
        if not url.drivername.startswith("postgresql"):
            p.error("--database-url must be a postgresql URL (SQLite is the default)")
    if a.tmp_dir is not None and not a.tmp_dir.is_dir():
        p.error(f"--tmp-dir {str(a.tmp_dir)!r} is not a directory")
    return Config(
        sizes=QUICK_SIZES if a.quick else (a.sizes or DEFAULT_SIZES),
        repeat=a.repeat,
        database_url=a.database_url,
        memory=a.memory,
        profile=a.profile,
        freeze_gc=a.freeze_gc,
        tmp_root=a.tmp_dir,
        seed=a.seed,
        quick=a.quick,
    )


# ---------------------------------------------------------------------------------
# small helpers


def fmt(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:,.{digits}f}"


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores; "
        f"Python {platform.python_version()}"
    )


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def write_spec(directory: Path, name: str, subjects: bool) -> str:
    """A small exact-match custom benchmark (no network); ``subjects``: even/odd labels."""
    rows = [
        {"id": f"s{i}", "q": f"{i} + 1?", "a": str(i + 1), "topic": ("even", "odd")[i % 2]}
        for i in range(20)
    ]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (directory / f"{name}.jsonl").write_bytes(data)
    spec: dict[str, Any] = {
        "name": name,
        "version": 1,
        "format": "exact-match",
        "data": {
            "path": f"{name}.jsonl",
            "sha256": hashlib.sha256(data).hexdigest(),
            "id_field": "id",
        },
        "prompt": {"version": 1, "template": "Q: {q}\nA:"},
        "answer_field": "a",
        "extract": {"kind": "number"},
        "compare": "number",
        "labels": {"skill": "reasoning", "subject": "science/math"},
    }
    if subjects:
        spec["labels"] = {"skill": "reasoning", "subject": "science/{topic}"}
    path = directory / f"{name}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


@contextlib.contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """The URL of a new empty ``qb_bench_web`` on the server of ``admin_url``, dropped on exit.

    A leftover ``qb_bench_web`` (from an interrupted run) is dropped first; no other
    database is touched.
    """
    parsed = make_url(admin_url)
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT")
    drop = text(f'DROP DATABASE IF EXISTS "{SCRATCH_DB}" WITH (FORCE)')
    try:
        with admin.connect() as conn:
            conn.execute(drop)
            conn.execute(text(f'CREATE DATABASE "{SCRATCH_DB}"'))
        try:
            yield parsed.set(database=SCRATCH_DB).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(drop)
    finally:
        admin.dispose()


# ---------------------------------------------------------------------------------
# seeding


@dataclass
class Seeder:
    """Bulk inserts through SQLAlchemy Core (lists of rows), after ``build_context``."""

    ctx: Any
    rng: random.Random
    progress: Progress
    n: int
    model_ids: list[int] = field(default_factory=list)
    kinds: dict[int, str] = field(default_factory=dict)
    featured: list[int] = field(default_factory=list)
    bench_ids: dict[str, int] = field(default_factory=dict)
    samples: dict[int, list[str]] = field(default_factory=dict)
    rare: int = 0

    @property
    def engine(self) -> Engine:
        return self.ctx.db.write_engine  # type: ignore[no-any-return]

    def run(self) -> None:
        from quorumbench.db.models import Benchmark

        with self.engine.connect() as conn:
            rows = conn.execute(select(Benchmark.id, Benchmark.name).where(Benchmark.active))
            self.bench_ids = {name: bench_id for bench_id, name in rows}
        by_name = {b.name: b for b in self.ctx.loaded_benchmarks.values()}
        self.samples = {i: list(by_name[name].sample_ids()) for name, i in self.bench_ids.items()}
        steps = self.progress.add_task("", total=4)
        for name, step in (
            ("models", self.models),
            ("leaderboard rows", self.entries),
            ("tasks", self.tasks),
            ("statistics", self.analyze),
        ):
            self.progress.update(steps, description=f"seed n={self.n:,}: {name}")
            step()
            self.progress.advance(steps)
        self.progress.remove_task(steps)

    def models(self) -> None:
        """N models: 60% base (Hub), 20% LoRA adapters of an earlier base, 10% GGUF,
        10% endpoints; ~1% carry ``RARE_TAG`` in their name."""
        from quorumbench.db.models import Model
        from quorumbench.services.accounts import create_account

        now = self.ctx.now()
        owner = create_account(self.ctx, "bench-owner").id
        rng = self.rng
        rows: list[dict[str, Any]] = []
        kinds: list[str] = []
        base_refs: list[tuple[str, int]] = []
        for i in range(self.n):
            family = FAMILIES[i % len(FAMILIES)]
            size, params = rng.choice(SIZES)
            tag = f"r{rng.randrange(100):02d}x"
            self.rare += tag == RARE_TAG
            name = f"{family}-{size}-{tag}-{i:05d}"
            revision = f"{rng.getrandbits(160):040x}"
            kind = KIND_CYCLE[i % 10] if i >= 10 else "base"  # the first ten are bases
            row: dict[str, Any] = {
                "ref": f"hf:{family}-org/{name}@{revision}",
                "name": name,
                "owner_id": owner,
                "revision": revision,
                "weights_sha256": hashlib.sha256(f"w{i}".encode()).hexdigest(),
                "params": params,
                "architecture": "LlamaForCausalLM",
                "context_length": rng.choice((2048, 4096, 8192, 32768)),
                "dtype": rng.choice(("float16", "bfloat16", "float32")),
                "quantization": None,
                "license": rng.choice(LICENSES),
                "base_ref": None,
                "details": {},
                "active": True,
                "created_at": now - timedelta(seconds=rng.randrange(90 * 86400)),
            }
            if kind == "base":
                base_refs.append((row["ref"], params))
            elif kind == "lora":
                base_ref, base_params = rng.choice(base_refs)
                row.update(
                    base_ref=base_ref,
                    architecture="lora",
                    details={"kind": "adapter"},
                    # most record the adapter's own size, a quarter the base's
                    params=rng.choice((4_000_000, 40_000_000, 160_000_000, base_params)),
                )
            elif kind == "gguf":
                row.update(
                    ref=f"gguf:{family}-org/{name}-gguf/{name}.Q4_K_M.gguf@{revision}",
                    quantization="Q4_K_M",
                )
            else:
                row.update(
                    ref=f"openai:http://llm{i % 5}.example.invalid/v1#{name}",
                    revision="",
                    weights_sha256=None,
                    params=None,
                    architecture=None,
                    context_length=None,
                    dtype=None,
                    license=None,
                )
            rows.append(row)
            kinds.append(kind)
        with self.engine.begin() as conn:
            conn.execute(insert(Model), rows)
            ids = list(conn.scalars(select(Model.id).order_by(Model.id)))
        self.model_ids = ids
        self.kinds = dict(zip(ids, kinds, strict=True))
        self.featured = ids[:FEATURED]

    def entries(self) -> None:
        """Leaderboard rows on every benchmark (half the endpoints on ``arith`` only, and
        2% of the others miss one benchmark), and the aggregates they make."""
        from quorumbench.core.leaderboard import Accumulator, interval
        from quorumbench.core.pillars import MeasuredBenchmark, pillar_aggregate, rule_basis
        from quorumbench.db.models import LeaderboardAggregate, LeaderboardEntry
        from quorumbench.services.leaderboard import active_rule, aggregate_values, entry_values

        now = self.ctx.now()
        rng = self.rng
        with self.ctx.db.read() as session:
            rule = active_rule(self.ctx, session)
        basis = rule_basis(rule)
        entries, aggregates = [], []
        for model_id in self.model_ids:
            benches = sorted(self.bench_ids.values())
            if model_id not in self.featured:
                if self.kinds[model_id] == "endpoint" and rng.random() < 0.5:
                    benches = [self.bench_ids["arith"]]
                elif rng.random() < 0.02:
                    benches.remove(rng.choice(benches))
            quality = rng.betavariate(2, 2)
            parts = []
            for bench_id in benches:
                n_tasks = rng.randint(1, 40)
                n = n_tasks * SAMPLES_PER_TASK
                p = min(1.0, max(0.0, quality + rng.gauss(0, 0.08)))
                hits = sum(rng.random() < p for _ in range(min(n, 40)))  # a cheap binomial
                hits = round(hits * n / min(n, 40))
                acc = Accumulator(n_tasks, n, float(hits), float(hits), float(hits))
                updated = now - timedelta(seconds=rng.randrange(14 * 86400))
                entries.append(
                    {
                        "model_id": model_id,
                        "benchmark_id": bench_id,
                        **entry_values(acc, updated),
                        "chance_sum": 0.0,  # generative benchmarks: chance level 0
                    }
                )
                parts.append(MeasuredBenchmark(bench_id, interval(acc), 0.0, n, n_tasks, updated))
            agg = pillar_aggregate(parts, rule)
            aggregates.append({"model_id": model_id, **aggregate_values(agg, basis)})
        with self.engine.begin() as conn:
            conn.execute(insert(LeaderboardEntry), entries)
            conn.execute(insert(LeaderboardAggregate), aggregates)

    def tasks(self) -> None:
        """Epochs, and finished tasks with 3 leases, 3 results and an outcome each: every
        benchmark x epoch for the featured models (one DISPUTED), and ``OTHER_TASKS``
        on random other models (30% DISPUTED)."""
        from quorumbench.core.canonical import sha256_hex
        from quorumbench.db.models import (
            ConsensusOutcome,
            Epoch,
            Lease,
            Result,
            Runner,
            Task,
        )
        from quorumbench.services.accounts import create_account

        rng = self.rng
        now = self.ctx.now()
        seconds = self.ctx.settings.epoch_seconds
        first_epoch = int(now.timestamp()) // seconds - EPOCHS
        voters = []
        for k in range(QUORUM):
            account = create_account(self.ctx, f"volunteer{k}").id
            voters.append(account)
        with self.engine.begin() as conn:
            conn.execute(
                insert(Runner),
                [
                    {
                        "account_id": a,
                        "name": f"box-{k}",
                        "public_key": None,
                        "created_at": now,
                        "last_seen_at": now,
                        "agreements": 0,
                        "outliers": 0,
                        "suspended": False,
                    }
                    for k, a in enumerate(voters)
                ],
            )
            runners = dict(conn.execute(select(Runner.account_id, Runner.id)).all())
            epochs = []
            for e in range(first_epoch, first_epoch + EPOCHS):
                starts = datetime.fromtimestamp(e * seconds, UTC)
                seed = f"{rng.getrandbits(256):064x}"
                epochs.append(
                    {
                        "id": e,
                        "starts_at": starts,
                        "ends_at": starts + timedelta(seconds=seconds),
                        "seed": seed,
                        "seed_commitment": sha256_hex(seed),
                        "scheduled_at": starts,
                    }
                )
            conn.execute(insert(Epoch), epochs)

        wanted: dict[tuple[int, int, int], str] = {}
        for model_id in self.featured:
            for bench_id in self.bench_ids.values():
                for e in range(first_epoch, first_epoch + EPOCHS):
                    wanted[(model_id, bench_id, e)] = "DONE"
        wanted[(self.featured[0], self.bench_ids["arith"], first_epoch + EPOCHS - 1)] = "DISPUTED"
        others = self.model_ids[FEATURED:]
        while len(wanted) < FEATURED * len(self.bench_ids) * EPOCHS + OTHER_TASKS:
            key = (
                rng.choice(others),
                rng.choice(list(self.bench_ids.values())),
                rng.randrange(first_epoch, first_epoch + EPOCHS),
            )
            wanted.setdefault(key, "DISPUTED" if rng.random() < 0.3 else "DONE")

        tasks, leases, results, outcomes = [], [], [], []
        for task_id, ((model_id, bench_id, epoch), status) in enumerate(sorted(wanted.items()), 1):
            ids = rng.sample(self.samples[bench_id], SAMPLES_PER_TASK)
            created = datetime.fromtimestamp(epoch * seconds, UTC) + timedelta(minutes=5)
            final = created + timedelta(minutes=rng.randint(2, 50))
            truth = [float(rng.random() < 0.6) for _ in ids]
            votes = [list(truth) for _ in voters]
            if status == "DISPUTED":
                votes[1] = [1.0 - v for v in truth]
                votes[2] = [rng.choice((0.0, 1.0)) for _ in ids]
            elif rng.random() < 0.1:
                votes[2] = [1.0 - v for v in truth]  # an outlier
            score = sum(truth) / len(truth)
            tasks.append(
                {
                    "id": task_id,
                    "model_id": model_id,
                    "benchmark_id": bench_id,
                    "epoch_id": epoch,
                    "n_samples": SAMPLES_PER_TASK,
                    "status": status,
                    "round": 1,
                    "quorum": QUORUM,
                    "open_slots": 0,
                    "attempts": QUORUM,
                    "sample_ids": ids,
                    "priority": 0,
                    "score": score if status == "DONE" else None,
                    "created_at": created,
                    "finalized_at": final,
                    "canary": None,
                }
            )
            agreeing: list[int] = []
            outliers: list[int] = []
            for k, (account, sample_scores) in enumerate(zip(voters, votes, strict=True)):
                row_id = (task_id - 1) * QUORUM + k + 1
                leases.append(
                    {
                        "id": row_id,
                        "task_id": task_id,
                        "runner_id": runners[account],
                        "account_id": account,
                        "attempt": k + 1,
                        "round": 1,
                        "state": "SUBMITTED",
                        "leased_at": created,
                        "expires_at": created + timedelta(hours=1),
                        "ended_at": final,
                        "pull_key": None,
                        "failure": None,
                    }
                )
                outlier = status == "DONE" and sample_scores != truth
                (outliers if outlier else agreeing).append(row_id)
                digest = sha256_hex(f"{task_id}/{k}/{sample_scores}")
                results.append(
                    {
                        "id": row_id,
                        "task_id": task_id,
                        "lease_id": row_id,
                        "runner_id": runners[account],
                        "account_id": account,
                        "round": 1,
                        "score": sum(sample_scores) / len(sample_scores),
                        "n": len(sample_scores),
                        "outputs_sha256": digest,
                        "sample_scores": sample_scores,
                        "sample_output_hashes": [digest] * len(sample_scores),
                        "runtime_s": round(rng.uniform(5, 90), 2),
                        "hardware": {"device": "cpu"},
                        "payload_sha256": digest,
                        "counted": True,
                        "outlier": outlier,
                        "submitted_at": final - timedelta(seconds=QUORUM - k),
                        "model_revision": None,
                        "key_id": None,
                        "signed_at": None,
                        "signature": None,
                    }
                )
            outcomes.append(
                {
                    "id": task_id,
                    "task_id": task_id,
                    "round": 1,
                    "status": status,
                    "score": score if status == "DONE" else None,
                    "spread": 0.0 if status == "DONE" else 0.8,
                    "agreeing": agreeing if status == "DONE" else [],
                    "outliers": outliers,
                    "sample_consensus": truth if status == "DONE" else [],
                    "sample_agreement": [1.0] * len(ids) if status == "DONE" else [],
                    "decided_at": final,
                }
            )
        with self.engine.begin() as conn:
            conn.execute(insert(Task), tasks)
            conn.execute(insert(Lease), leases)
            conn.execute(insert(Result), results)
            conn.execute(insert(ConsensusOutcome), outcomes)

    def analyze(self) -> None:
        """PostgreSQL: planner statistics after the bulk load, as autovacuum would make.

        SQLite is left as the server ships it (no ANALYZE, no sqlite_stat1).
        """
        if self.ctx.db.dialect == "postgresql":
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {
                t: int(conn.scalar(text(f"SELECT COUNT(*) FROM {t}")) or 0)
                for t in ("models", "leaderboard_entries", "leaderboard_aggregates", "tasks")
            }


# ---------------------------------------------------------------------------------
# measuring


@dataclass(frozen=True)
class Timing:
    label: str
    path: str
    median_ms: float
    min_ms: float
    max_ms: float
    kib: float
    full_gcs: int
    """Full (generation 2) collections of the garbage collector during the timed runs."""
    gc_ms: float
    """Mean ms per timed run spent in the garbage collector (all generations)."""


class GcWatch:
    """Counts the garbage collector's full collections and times all of them (the
    ``gc.callbacks`` hook; it sees every thread, the TestClient's included)."""

    def __init__(self) -> None:
        self.full = 0
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._start
        self.full += info["generation"] == 2

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


@dataclass
class SizeResult:
    n: int
    backend: str
    seed_s: float
    counts: dict[str, int]
    timings: list[Timing]
    peak_mib: float | None = None
    profile: Profile | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> Timing:
        return self.timings[0]

    def ms(self, label: str) -> float:
        return next(t.median_ms for t in self.timings if t.label == label)


def requests_for(seeder: Seeder, last_page: int) -> list[tuple[str, str]]:
    """(label, path) of every measured request, the baseline first."""
    a, b, c = seeder.featured
    return [
        ("baseline: API leaderboard", BASELINE),
        ("/", "/"),
        ("/ sort=model", "/?sort=model"),
        ("/ q (~1%)", f"/?q={RARE_TAG}"),
        ("/ benchmark=arith", "/?benchmark=arith"),
        ("/ type=lora min_params=1B", "/?type=lora&min_params=1B"),
        ("/ last page", f"/?page={last_page}"),
        ("/ format=json", "/?format=json"),
        ("/ fragment=1", "/?fragment=1"),
        ("/models/<id>", f"/models/{a}"),
        ("/compare (3 models)", f"/compare?models={a},{b},{c}"),
    ]


def time_request(client: Any, label: str, path: str, repeat: int, tick: Any) -> Timing:
    """``repeat`` GETs timed (wall ms) after one warm-up GET."""
    resp = client.get(path)
    tick()
    if resp.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {resp.status_code}: {resp.text[:300]}")
    size = len(resp.content)
    times = []
    with GcWatch() as watch:
        for _ in range(repeat):
            t0 = time.perf_counter()
            resp = client.get(path)
            times.append((time.perf_counter() - t0) * 1000)
            tick()
            if resp.status_code != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status_code}")
    return Timing(
        label,
        path,
        statistics.median(times),
        min(times),
        max(times),
        size / 1024,
        watch.full,
        watch.seconds * 1000 / repeat,
    )


@dataclass(frozen=True)
class Profile:
    handler_ms: float
    """Median of 3 calls of the ``/`` handler in this thread, without the profiler (the
    garbage collector as it runs)."""
    profiled_ms: float
    """One call under cProfile, with the garbage collector off."""
    parts: list[tuple[str, float]]
    """(function, cumulative ms under the profiler) of the main steps."""
    top: list[tuple[str, int, float, float]]
    """(function, calls, own ms, cumulative ms), the largest own times."""


PROFILE_PARTS = (
    ("services/board.py", "board"),
    ("services/board.py", "_all_rows"),
    ("services/board.py", "to_score"),
    ("core/ranking.py", "standings"),
    ("db/types.py", "process_result_value"),
    ("web/render.py", "render"),
)


def profile_home(app: Any) -> Profile:
    """The ``/`` handler called in this thread (no HTTP, so cProfile sees it all)."""
    from starlette.requests import Request

    from quorumbench.web import routes

    scope = {"type": "http", "app": app, "method": "GET", "headers": [], "query_string": b""}
    request = Request(scope)

    def call() -> Any:
        return routes.leaderboard_page(
            request,
            benchmark=None,
            sort="rank",
            order=None,
            q=None,
            type=None,
            min_params=None,
            max_params=None,
            license=None,
            page=1,
            per_page=PER_PAGE,
            format="html",
            fragment=False,
        )

    call()  # warm
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    # The garbage collector is off for the profiled call: cProfile would charge a
    # collection's pause to whichever function happened to allocate when it started.
    gc.collect()
    gc.disable()
    try:
        profiler = cProfile.Profile()
        t0 = time.perf_counter()
        profiler.enable()
        call()
        profiler.disable()
        profiled = (time.perf_counter() - t0) * 1000
    finally:
        gc.enable()
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    top, parts = [], []
    for (filename, line, name), (_cc, calls, own, cumulative, _) in stats.items():
        where = filename.split("site-packages/")[-1].split("/src/")[-1]
        label = f"{name} ({where}:{line})" if line else name
        top.append((label, calls, own * 1000, cumulative * 1000))
        for suffix, function in PROFILE_PARTS:
            if filename.endswith(suffix) and name == function:
                parts.append((f"{suffix}:{line} {function}", cumulative * 1000))
    top.sort(key=lambda r: -r[2])
    parts.sort(key=lambda r: -r[1])
    return Profile(statistics.median(times), profiled, parts, top[:12])


def run_size(n: int, cfg: Config, progress: Progress) -> SizeResult:
    from fastapi.testclient import TestClient

    from quorumbench.api.app import create_app
    from quorumbench.services.wiring import build_context
    from quorumbench.settings import ServerSettings

    # The stack undoes everything in reverse, whatever fails: the context's connections
    # close before the scratch database is dropped, then the temp dir goes.
    with contextlib.ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix=f"qb-web-{n}-", dir=cfg.tmp_root))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        stack.callback(gc.unfreeze)
        if cfg.database_url:
            url = stack.enter_context(scratch_postgres(cfg.database_url))
            backend = "postgres"
        else:
            url = f"sqlite:///{tmp / 'web.db'}"
            backend = "sqlite"
        settings = ServerSettings(
            data_dir=tmp,
            database_url=url,
            benchmarks=[
                "arith",
                write_spec(tmp, "web-sums", subjects=True),
                write_spec(tmp, "web-count", subjects=False),
            ],
            # three pillars, one benchmark each (the others weigh 0)
            pillars={"web-sums": "reasoning", "web-count": "language"},
            pillar_weights={"reasoning": 1, "coding": 0, "math": 1, "language": 1, "safety": 0},
            quorum=QUORUM,
            max_rounds=1,
            samples_per_task=SAMPLES_PER_TASK,
            quota_evaluations=0,
            canary_rate=0.0,
            epoch_task_budget=0,
            web_cache_s=0,  # first every request reads and ranks; the memo is timed after
        )
        t0 = time.perf_counter()
        ctx = build_context(settings)  # migrates, registers the three benchmarks
        stack.callback(ctx.close)
        seeder = Seeder(ctx, random.Random(cfg.seed), progress, n)
        seeder.run()
        seed_s = time.perf_counter() - t0
        result = SizeResult(n, backend, seed_s, seeder.counts(), [])
        result.notes.append(
            f"q={RARE_TAG} matches {seeder.rare} model names; featured models "
            f"{seeder.featured} have {EPOCHS} epochs x {len(seeder.bench_ids)} benchmarks "
            "of tasks"
        )
        app = create_app(settings, context=ctx, run_scheduler=False)
        with TestClient(app) as client:
            board = client.get("/?format=json").json()
            gc.collect()
            if cfg.freeze_gc:
                gc.freeze()
            requests = requests_for(seeder, board["pages"])
            bar = progress.add_task(f"measure n={n:,}", total=len(requests) * (cfg.repeat + 1))
            for label, path in requests:
                progress.update(bar, description=f"measure n={n:,} {path}")
                result.timings.append(
                    time_request(client, label, path, cfg.repeat, lambda: progress.advance(bar))
                )
            # Then the same board views with the ranking memo on (QB_WEB_CACHE_S): the
            # first request reads and ranks, the timed ones filter, sort and page it.
            ctx.settings = settings.model_copy(update={"web_cache_s": 3600})
            for label, path in requests:
                if path == "/" or path.startswith("/?"):
                    progress.update(bar, description=f"measure n={n:,} {path} (memo)")
                    result.timings.append(
                        time_request(client, f"{label} (memo)", path, cfg.repeat, lambda: None)
                    )
            progress.remove_task(bar)
            if cfg.memory:
                tracemalloc.start()
                client.get("/")
                result.peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
            if cfg.profile:
                result.profile = profile_home(app)
        return result


# ---------------------------------------------------------------------------------
# report


def size_table(r: SizeResult, repeat: int) -> Table:
    table = Table(
        title=f"{r.backend}, n={r.n:,} models (median of {repeat} timed runs)",
        title_justify="left",
    )
    columns = (
        "request",
        "path",
        "median ms",
        "min ms",
        "max ms",
        "x baseline",
        "full GCs",
        "GC ms/req",
        "KiB",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("request", "path") else "right")
    base = r.baseline.median_ms
    for t in r.timings:
        table.add_row(
            t.label,
            t.path,
            fmt(t.median_ms, 2),
            fmt(t.min_ms, 2),
            fmt(t.max_ms, 2),
            f"{t.median_ms / base:,.1f}",
            f"{t.full_gcs}/{repeat}",
            fmt(t.gc_ms, 1),
            fmt(t.kib),
        )
    return table


def report(results: list[SizeResult], cfg: Config, started: datetime, load1: float) -> None:
    console.rule("web pages")
    console.print(f"date {started:%Y-%m-%d %H:%M} UTC; machine {machine_line()}")
    console.print(
        f"backend {results[0].backend}; sizes {', '.join(f'{r.n:,}' for r in results)}; "
        f"{cfg.repeat} timed runs per request after 1 warm-up; TestClient on create_app "
        "(in process, no socket); "
        + ("gc.freeze() before measuring" if cfg.freeze_gc else "garbage collector as is")
        + ("; QUICK (smoke sizes)" if cfg.quick else "")
    )
    console.print(f"1-min load average before: {load1:.2f}; at end {os.getloadavg()[0]:.2f}")
    for r in results:
        console.print(size_table(r, cfg.repeat))
        counts = ", ".join(f"{k} {v:,}" for k, v in r.counts.items())
        console.print(f"  rows: {counts}; seeded in {r.seed_s:.1f} s")
        if r.peak_mib is not None:
            console.print(f"  peak Python memory of one GET / (tracemalloc): {r.peak_mib:.1f} MiB")
        for note in r.notes:
            console.print(f"  note: {note}")
        if r.profile:
            pr = r.profile
            console.print(
                f"  the / handler called in process (no HTTP): {fmt(pr.handler_ms, 1)} ms "
                f"(median of 3); {fmt(pr.profiled_ms, 1)} ms under cProfile with the garbage "
                "collector off, of which "
                + "; ".join(f"{name} {fmt(ms, 1)}" for name, ms in pr.parts)
            )
            prof = Table(
                title=f"n={r.n:,}: / handler under cProfile (GC off), top functions by own time",
                title_justify="left",
            )
            for col in ("function", "calls", "own ms", "cumulative ms"):
                prof.add_column(col, justify="left" if col == "function" else "right")
            for label, calls, own, cum in pr.top:
                prof.add_row(label, f"{calls:,}", fmt(own, 1), fmt(cum, 1))
            console.print(prof)

    first, last = results[0], results[-1]
    growth = Table(title="growth: median ms per size, and last / first", title_justify="left")
    growth.add_column("request")
    for r in results:
        growth.add_column(f"n={r.n:,}", justify="right")
    growth.add_column(f"x ({last.n // first.n}x models)", justify="right")
    for t in first.timings:
        row = [fmt(r.ms(t.label), 2) for r in results]
        growth.add_row(t.label, *row, f"{last.ms(t.label) / t.median_ms:.1f}")
    console.print(growth)
    home_growth = last.ms("/") / first.ms("/")
    models_growth = last.n / first.n
    console.print(
        f"  GET / went from {fmt(first.ms('/'), 1)} ms at n={first.n:,} to "
        f"{fmt(last.ms('/'), 1)} ms at n={last.n:,}: {home_growth:.1f}x for {models_growth:.0f}x "
        f"the models (exponent {math.log(home_growth) / math.log(models_growth):.2f}; 1 = "
        f"linear); the baseline {last.baseline.median_ms / first.baseline.median_ms:.1f}x; "
        f"/ against the baseline: {first.ms('/') / first.baseline.median_ms:.0f}x at "
        f"n={first.n:,}, {last.ms('/') / last.baseline.median_ms:.0f}x at n={last.n:,}"
        if len(results) > 1
        else "  one size only: no growth"
    )
    for r in results:
        slowest = max(r.timings, key=lambda t: t.median_ms)
        print(
            f"RESULT n={r.n} baseline_ms={r.baseline.median_ms:.2f} home_ms={r.ms('/'):.2f} "
            f"home_ratio={r.ms('/') / r.baseline.median_ms:.1f} slowest={slowest.path} "
            f"slowest_ms={slowest.median_ms:.2f}",
            flush=True,
        )


def reachable(url: str) -> str | None:
    """None if the server of ``url`` answers; else why not, on one line."""
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect():
            return None
    except Exception as exc:  # psycopg's OperationalError, wrapped by SQLAlchemy
        return str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.database_url and (why := reachable(cfg.database_url)):
        print(f"web_pages.py: error: --database-url: cannot connect: {why}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    load1 = os.getloadavg()[0]
    results = []
    with progress_bar() as progress:
        for n in cfg.sizes:
            results.append(run_size(n, cfg, progress))
            console.print(
                f"n={n:,}: seeded in {results[-1].seed_s:.1f} s, "
                f"GET / {fmt(results[-1].ms('/'), 1)} ms, "
                f"baseline {fmt(results[-1].baseline.median_ms, 2)} ms"
            )
    report(results, cfg, started, load1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
