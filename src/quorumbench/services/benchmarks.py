"""Benchmarks known to the server: one row per (name, version).

Registering them at startup gives each its pillar (:func:`pillar_of`), fills in the
chance levels that rows from before pillars lack (``services/chance.py``) and brings
the leaderboard aggregates up to date when the active benchmarks, their weights or
pillars, or the pillar weights changed since they were computed.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from quorumbench.benchmarks import DEFAULT_PILLARS, load_benchmark
from quorumbench.core.taxonomy import PILLARS, normalised_weights, pillar_problem
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.errors import ConfigError
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.logs import event
from quorumbench.services.chance import fill_chance_sums
from quorumbench.services.context import ServerContext
from quorumbench.services.leaderboard import sync_aggregates

log = logging.getLogger("quorumbench.leaderboard")


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


def pillar_of(ctx: ServerContext, bench: Benchmark) -> str:
    """The benchmark's pillar: the ``pillars`` setting's, else its spec's own (a custom
    benchmark's ``pillar``), else the built-in assignment (``DEFAULT_PILLARS``).

    A benchmark with none, or a spec naming no pillar of taxonomy v1, is a
    ``ConfigError``: the server does not start with it.
    """
    pillar = (
        ctx.settings.pillars.get(bench.name)
        or getattr(bench, "pillar", None)
        or DEFAULT_PILLARS.get(bench.name)
    )
    if not pillar:
        raise ConfigError(
            f"benchmark {bench.name!r} has no pillar: name one in QB_PILLARS (e.g. "
            f'QB_PILLARS=\'{{"{bench.name}": "reasoning"}}\') or in its spec '
            f"(one of {', '.join(PILLARS)})"
        )
    problem = pillar_problem(str(pillar))
    if problem:
        raise ConfigError(f"benchmark {bench.name!r}: {problem}")
    return str(pillar)


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
    pillars = {name: pillar_of(ctx, loaded(ctx, name)) for name in names}  # before writing
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
            row.pillar = pillars[name]
            current.add(row.id)
            rows.append(row)
        for row in session.scalars(select(BenchmarkRow).where(BenchmarkRow.active)):
            if row.id not in current:
                row.active = False
        session.flush()
        fill_chance_sums(ctx, session)
        sync_aggregates(ctx, session)
    _warn_uncovered(ctx, set(pillars.values()))
    return rows


def _warn_uncovered(ctx: ServerContext, covered: set[str]) -> None:
    """Log the pillars of positive weight that no active benchmark belongs to: while
    there are any, no model is ranked on the aggregate."""
    weights = normalised_weights(ctx.settings.pillar_weights)
    uncovered = [p for p in PILLARS if weights[p] > 0 and p not in covered]
    if uncovered:
        event(
            log,
            "leaderboard.pillars_uncovered",
            level=logging.WARNING,
            pillars=",".join(uncovered),
            hint="no model is ranked on the aggregate until every pillar of positive "
            "weight has a benchmark (QB_BENCHMARKS, QB_PILLARS) or weight 0 "
            "(QB_PILLAR_WEIGHTS)",
        )
