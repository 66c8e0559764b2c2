"""Benchmarks known to the server: one row per (name, version)."""

from __future__ import annotations

from sqlalchemy import select

from quorumbench.benchmarks import load_benchmark
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.services.context import ServerContext


def loaded(ctx: ServerContext, name: str) -> Benchmark:
    """The benchmark object (data verified), loaded once per process."""
    if name not in ctx.loaded_benchmarks:
        ctx.loaded_benchmarks[name] = load_benchmark(name, BenchmarkContext(ctx.datasets_dir))
    return ctx.loaded_benchmarks[name]


def ensure_benchmarks(ctx: ServerContext, names: list[str]) -> list[BenchmarkRow]:
    """Register each benchmark's current version (idempotent); others become inactive."""
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
                    samples_per_task=ctx.settings.samples_per_task,
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
    return rows
