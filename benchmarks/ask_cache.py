"""Cache-answered plans (``services/ask_cache.answer``) at 10,000 models and 2,000,000
finalized samples, on SQLite and PostgreSQL.

The script migrates a fresh database per backend and bulk-inserts what an answer
reads: N models (hf, LoRA adapters with their base's size, GGUF, endpoints), labelled
benchmarks (an MMLU-like one with 57 subjects, a Korean one with 45, math, code,
safety, TruthfulQA-like categories …; about 160 label sets), and the
``label_aggregates`` rows that the finalizing transaction would have written for
``--samples`` per-sample consensus scores: each model is measured on a few
benchmarks, ``samples / models`` samples in all, each sample falling in one of its
benchmark's label sets, scored 0/1 by the model's skill (a probability in [0, 1] on the
TruthfulQA-MC2-like one, so slices that include it have fractional sums). The rows are the sums of
those simulated samples per (label set, model), plus each benchmark's total set,
exactly as ``services/label_cache.py`` keeps them. Tasks, results and consensus
outcomes are not written: an answer never reads them (that is the point of the
cache). The tests check that the rows equal what finalizing real tasks writes.

It then times ``answer()`` for ``--asks`` requests cycling over several plans (each
in its own read session, as a request has): broad and narrow labels, pillars,
named benchmarks, model filters, named models. One line per backend::

    RESULT backend=<sqlite|postgresql> ask_p50_ms=<x> ask_p99_ms=<y> cpu_p50_ms=<c> cpu_p99_ms=<d>

(wall-clock times of whole requests; ``cpu_*``: this process's CPU time in them, which
leaves out waiting for the database server and for CPUs other processes hold).

With ``--explain``, it prints the database's plan of the grouped read of the
broadest plan. Run by hand; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, text
from sqlalchemy.engine import make_url

from quorumbench.core.plans import Plan, parse_plan
from quorumbench.core.taxonomy import LABEL_KEYS
from quorumbench.db.engine import Database, connect
from quorumbench.db.label_models import LabelAggregate, LabelSet
from quorumbench.db.migrate import upgrade
from quorumbench.db.models import Account, Benchmark, Model
from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services import ask_cache, interval_batch
from quorumbench.services.ask_cache import answer
from quorumbench.services.context import ServerContext
from quorumbench.services.label_cache import TOTAL_LABELS
from quorumbench.settings import ServerSettings

SCRATCH_DB = "qb_bench_ask"
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
BATCH = 20_000
PER_MODEL_BENCHMARKS = 5
SIZES = (135_000_000, 360_000_000, 1_100_000_000, 3_000_000_000, 7_000_000_000, 70_000_000_000)


def _subjects(coarse: str, n: int) -> list[str]:
    return [f"{coarse}/topic-{i}" for i in range(n)]


# name, pillar, kind, label sets as (skill, subject, target, format, language), chance
BENCHMARKS: list[tuple[str, str, list[tuple[str, str, str, str, str]], float]] = [
    (
        "mmlu-like",
        "reasoning",
        [
            ("knowledge", s, "general", "mcqa", "en")
            for c, k in (("science", 20), ("hass", 20), ("tech", 10), ("social-intelligence", 7))
            for s in _subjects(c, k)
        ],
        0.25,
    ),  # fmt: skip
    (
        "kmmlu-like",
        "language",
        [
            ("knowledge", s, "local/kr", "mcqa", "ko")
            for c, k in (("science", 15), ("hass", 15), ("culture", 15))
            for s in _subjects(c, k)
        ],
        0.25,
    ),  # fmt: skip
    ("gsm-like", "math", [("reasoning", "science/math", "general", "short-form", "en")], 0.0),
    ("ko-math", "math", [("reasoning", "science/math", "local/kr", "short-form", "ko")], 0.0),
    (
        "arc-like",
        "reasoning",
        [
            ("reasoning", f"science/{s}", "general", "mcqa", "en")
            for s in ("physics", "chemistry", "biology", "earth")
        ],
        0.25,
    ),  # fmt: skip
    (
        "truthful-like",
        "safety",
        [("alignment", s, "general", "binary", "en") for s in _subjects("hass", 38)],
        0.5,
    ),
    ("code-like", "coding", [("reasoning", "tech/coding", "general", "code", "en")], 0.0),
    (
        "safety-like",
        "safety",
        [
            ("alignment", "social-intelligence/safety", "general", "binary", "en"),
            ("value", "social-intelligence/bias", "general", "mcqa", "en"),
        ],
        0.4,
    ),
    (
        "grammar-like",
        "language",
        [("knowledge", "hass/linguistics", "general", "binary", lang) for lang in ("en", "ja")],
        0.5,
    ),
]

FRACTIONAL = {"truthful-like"}
"""Benchmarks whose per-sample scores lie between 0 and 1 (TruthfulQA-MC2's
probabilities): their slices' sums are fractions, shared by no other model, so each
model's interval is computed once per (sum, count)."""

PLANS: list[dict[str, Any]] = [
    {},
    {"labels": {"skill": ["knowledge"]}},
    {"labels": {"language": ["ko"], "subject": ["science/math"]}},
    {"labels": {"subject": ["science"]}},
    {"labels": {"target": ["local/kr"]}, "budget": 50},
    {"pillars": ["math", "coding"]},
    {"benchmarks": ["mmlu-like"], "labels": {"subject": ["hass"]}},
    {"labels": {"format": ["mcqa"], "language": ["en"]}},
    {"models": {"select": "filter", "kinds": ["hf", "lora"], "max_params": 3_000_000_000}},
    {
        "labels": {"skill": ["alignment", "value"]},
        "models": {"select": "filter", "kinds": ["gguf"]},
    },
    {"models": {"select": "named", "names": [f"model-{i}" for i in range(0, 10_000, 997)]}},
]


def seed(db: Database, models: int, samples: int, rng: random.Random) -> int:
    """Bulk-insert models, benchmarks, label sets and their aggregates; the rows written."""
    with db.write_connection() as conn:
        owner = conn.execute(
            insert(Account)
            .values(name="owner", is_admin=False, created_at=NOW)
            .returning(Account.id)
        ).scalar_one()
        bench_ids: list[int] = []
        for name, pillar, _, _ in BENCHMARKS:
            bench_ids.append(
                conn.execute(
                    insert(Benchmark)
                    .values(
                        name=name, version=1, prompt_version=1, kind="choice",
                        dataset_sha256="0" * 64, config={}, samples_per_task=20, weight=1.0,
                        active=True, pillar=pillar, created_at=NOW,
                    )
                    .returning(Benchmark.id)
                ).scalar_one()
            )  # fmt: skip
        sets: list[list[int]] = []
        totals: list[int] = []
        for bench_id, (_, _, labels, _) in zip(bench_ids, BENCHMARKS, strict=True):
            ids = []
            for combo in [*labels, TOTAL_LABELS]:
                ids.append(
                    conn.execute(
                        insert(LabelSet)
                        .values(benchmark_id=bench_id, **dict(zip(LABEL_KEYS, combo, strict=True)))
                        .returning(LabelSet.id)
                    ).scalar_one()
                )
            totals.append(ids.pop())
            sets.append(ids)
        rows = []
        for i in range(models):
            kind = ("hf", "hf", "hf", "lora", "gguf", "openai")[i % 6]
            params = SIZES[i % len(SIZES)] if i % 17 else None
            ref = {
                "hf": f"hf:org/model-{i}@{i:040x}",
                "lora": f"hf:org/adapter-{i}@{i:040x}",
                "gguf": f"gguf:org/model-{i}/m.gguf@{i:040x}",
                "openai": f"openai:https://api{i}.example.com/v1#model-{i}",
            }[kind]
            details = {"kind": "adapter", "base_params": params} if kind == "lora" else {}
            rows.append(
                {"ref": ref, "name": f"model-{i}", "owner_id": owner, "revision": f"{i:040x}",
                 "params": params if kind != "lora" else 4_000_000, "details": details,
                 "active": True, "created_at": NOW}
            )  # fmt: skip
        for start in range(0, len(rows), BATCH):
            conn.execute(insert(Model), rows[start : start + BATCH])
        model_ids = list(conn.scalars(select(Model.id).order_by(Model.id)))
        per_model = samples // models
        per_bench = per_model // PER_MODEL_BENCHMARKS
        aggregates: list[dict[str, Any]] = []
        written = 0
        for m, model_id in enumerate(model_ids):
            skill = rng.random()
            for b in rng.sample(range(len(BENCHMARKS)), PER_MODEL_BENCHMARKS):
                chance = BENCHMARKS[b][3]
                cells: dict[int, list[float]] = {}
                for _ in range(per_bench):
                    cell = cells.setdefault(rng.choice(sets[b]), [0, 0.0])
                    cell[0] += 1
                    if BENCHMARKS[b][0] in FRACTIONAL:  # MC2-like: a probability per item
                        cell[1] += min(1.0, max(0.0, rng.gauss(skill, 0.2)))
                    else:
                        cell[1] += 1.0 if rng.random() < skill else 0.0
                when = NOW - timedelta(minutes=rng.randrange(100_000))
                whole = [per_bench, sum(c[1] for c in cells.values())]
                for set_id, (n, total) in [*cells.items(), (totals[b], whole)]:
                    aggregates.append(
                        {"label_set_id": set_id, "model_id": model_id,
                         "benchmark_id": bench_ids[b], "n_samples": n, "sample_sum": total,
                         "chance_sum": chance * n, "updated_at": when}
                    )  # fmt: skip
            if len(aggregates) >= BATCH or m == len(model_ids) - 1:
                conn.execute(insert(LabelAggregate), aggregates)
                written += len(aggregates)
                aggregates = []
    # statistics (and, on PostgreSQL, the visibility map that lets the grouped read
    # scan the covering index only), as autovacuum keeps them on a running server
    if db.dialect == "postgresql":
        with db.write_engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    else:
        with db.write_connection() as conn:
            conn.execute(text("ANALYZE"))
    return written


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(backend: str, url: str, args: argparse.Namespace, tmp: Path) -> None:
    db = connect(url)
    try:
        upgrade(db)
        started = time.perf_counter()
        written = seed(db, args.models, args.samples, random.Random(args.seed))
        print(
            f"{backend}: seeded {args.models} models, {args.samples} samples as {written} "
            f"label_aggregates rows in {time.perf_counter() - started:.1f} s"
        )
        settings = ServerSettings(database_url=url, data_dir=tmp)
        ctx = ServerContext(settings, db, SqlTaskQueue(db, 60))
        plans = [parse_plan(p) for p in PLANS]
        interval_batch.forget()  # the first asks pay for every interval
        times: dict[int, list[float]] = {i: [] for i in range(len(plans))}
        sizes: dict[int, int] = {}
        every: list[float] = []
        cpu: list[float] = []
        for k in range(args.asks):
            i = k % len(plans)
            t0, c0 = time.perf_counter(), time.process_time()
            with db.read() as session:
                got = answer(ctx, session, plans[i])
            ms = (time.perf_counter() - t0) * 1000
            cpu.append((time.process_time() - c0) * 1000)
            times[i].append(ms)
            every.append(ms)
            sizes[i] = len(got.rows)
            if k < len(plans):
                print(f"  first ask of plan {i}: {ms:.1f} ms, {len(got.rows)} rows")
        for i, plan in enumerate(plans):
            print(
                f"  plan {i:2d}: rows={sizes[i]:5d} median={statistics.median(times[i]):7.1f} ms "
                f"max={max(times[i]):7.1f} ms  {describe(plan)}"
            )
        if args.explain:
            explain(db, plans[0])
        print(f"  load average during the asks: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(
            f"RESULT backend={backend} ask_p50_ms={percentile(every, 0.5):.1f} "
            f"ask_p99_ms={percentile(every, 0.99):.1f} "
            f"cpu_p50_ms={percentile(cpu, 0.5):.1f} cpu_p99_ms={percentile(cpu, 0.99):.1f}"
        )
        sys.stdout.flush()
    finally:
        db.dispose()


def describe(plan: Plan) -> str:
    text_ = plan.canonical().decode()
    return text_ if len(text_) < 110 else text_[:107] + "..."


def explain(db: Database, plan: Plan) -> None:
    """The database's plan of ``plan``'s grouped read (the query answer() runs)."""
    with db.read() as session:
        conn = session.connection()
        ids, names, _ = ask_cache._label_sets(conn, plan)
        query = ask_cache._grouped_read(
            plan, ids, sorted(names), sqlite_text=db.dialect == "sqlite"
        )
        sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
        prefix = "EXPLAIN QUERY PLAN " if db.dialect == "sqlite" else "EXPLAIN ANALYZE "
        for row in conn.execute(text(prefix + sql)):
            print("   ", " | ".join(str(x) for x in row))


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    import psycopg

    libpq = make_url(admin_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {SCRATCH_DB}")
    try:
        yield make_url(admin_url).set(database=SCRATCH_DB).render_as_string(False)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB} WITH (FORCE)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="ask_cache.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=10_000)
    p.add_argument("--samples", type=int, default=2_000_000)
    p.add_argument("--asks", type=int, default=220)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "QB_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="any database on the server: the script makes and drops its own there",
    )
    p.add_argument("--explain", action="store_true")
    args = p.parse_args(argv)
    if args.models < 1 or args.samples < args.models * PER_MODEL_BENCHMARKS or args.asks < 1:
        p.exit(2, "ask_cache.py: error: need models >= 1, samples >= 5 per model, asks >= 1\n")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "postgresql"}
    if unknown:
        p.exit(2, f"ask_cache.py: error: unknown backend(s) {', '.join(sorted(unknown))}\n")
    with tempfile.TemporaryDirectory(prefix="qb-bench-ask-") as tmp:
        for backend in backends:
            if backend == "sqlite":
                run(backend, f"sqlite:///{Path(tmp) / 'ask.db'}", args, Path(tmp))
            else:
                with scratch_postgres(args.postgres_url) as url:
                    run(backend, url, args, Path(tmp))


if __name__ == "__main__":
    main()
