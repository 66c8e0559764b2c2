"""Benchmarks known to the server: one row per (name, version).

Registering them at startup also brings the leaderboard aggregates up to date when
the active benchmarks or their weights changed since they were computed.
"""

from __future__ import annotations

from sqlalchemy import select

from quorumbench.benchmarks import load_benchmark
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.services.context import ServerContext
from quorumbench.services.leaderboard import sync_aggregates


def loaded(ctx: ServerContext, name: str) -> Benchmark:
    """The benchmark object (data verified), loaded once per process.

    ``name`` is a registered name or, for a custom benchmark, its spec's path; either
    way the object is also remembered under its own name, which is what the database
    and the scheduler use.
    """
    if name not in ctx.loaded_benchmarks:
        bench = load_benchmark(name, BenchmarkContext(ctx.datasets_dir))
        ctx.loaded_benchmarks[name] = bench
        ctx.loaded_benchmarks.setdefault(bench.name, bench)
    return ctx.loaded_benchmarks[name]


def list_benchmarks(ctx: ServerContext) -> list[BenchmarkRow]:
    """Every benchmark version known here (active or not), by name and version."""
    with ctx.db.read() as session:
        return list(
            session.scalars(select(BenchmarkRow).order_by(BenchmarkRow.name, BenchmarkRow.version))
        )


def ensure_benchmarks(ctx: ServerContext, names: list[str]) -> list[BenchmarkRow]:
    """Register each benchmark's current version (idempotent); others become inactive.

    Rebuilds the leaderboard aggregates, in the same transaction, if they were computed
    with other active benchmarks or weights (a fresh database has none to rebuild).
    """
    rows = []
    with ctx.db.write() as session:
        current = set()
        for name in names:
            bench = loaded(ctx, name)
            row = session.scalars(
                select(BenchmarkRow).where(
                    BenchmarkRow.name == bench.name, BenchmarkRow.version == bench.version
                )
            ).first()
            if row is None:
                row = BenchmarkRow(
                    name=bench.name,
                    version=bench.version,
                    prompt_version=bench.prompt_version,
                    kind=bench.kind,
                    dataset_sha256=bench.dataset_sha256,
                    config=dict(bench.config),
                    # a small benchmark (a custom spec of a few items) uses all it has
                    samples_per_task=min(ctx.settings.samples_per_task, len(bench.sample_ids())),
                    weight=1.0,
                    active=True,
                    created_at=ctx.now(),
                )
                session.add(row)
                session.flush()
            row.active = True
            current.add(row.id)
            rows.append(row)
        for row in session.scalars(select(BenchmarkRow).where(BenchmarkRow.active)):
            if row.id not in current:
                row.active = False
        session.flush()
        sync_aggregates(ctx, session)
    return rows
