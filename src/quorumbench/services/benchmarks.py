"""Benchmarks known to the server: one row per (name, version).

Two kinds: those the server's settings name (``benchmarks``: built-ins, plugins, spec
files), registered at every start, and those created through the API
(``services/created_benchmarks.py``), whose row holds their spec (``spec`` not null)
and whose data the server fetches by URL into a cache under its data directory.
Registering the first kind at startup leaves the second alone: a benchmark created
through the API stays active across restarts until it is retired.

Registering them at startup gives each its pillar (:func:`pillar_of`), fills in the
chance levels that rows from before pillars lack (``services/chance.py``) and brings
the leaderboard aggregates up to date when the active benchmarks, their weights or
pillars, or the pillar weights changed since they were computed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import select

from quorumbench.benchmarks import DEFAULT_PILLARS, load_benchmark
from quorumbench.benchmarks.custom import benchmark_from_spec
from quorumbench.core.taxonomy import PILLARS, normalised_weights, pillar_problem
from quorumbench.db.models import Benchmark as BenchmarkRow
from quorumbench.errors import ConfigError, QuorumError
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.evaluation.remote_data import FetchPolicy
from quorumbench.evaluation.spec import parse_spec
from quorumbench.logs import event
from quorumbench.services.chance import fill_chance_sums
from quorumbench.services.context import ServerContext
from quorumbench.services.label_cache import backfill
from quorumbench.services.leaderboard import sync_aggregates
from quorumbench.settings import ServerSettings

DATA_CACHE = "benchmark-data"

log = logging.getLogger("quorumbench.leaderboard")


def data_cache_dir(settings: ServerSettings) -> Path:
    """Where the server keeps the data of benchmarks created through the API, one file
    per SHA-256 (never in the database; fetched again and checked when missing)."""
    return settings.data_dir / DATA_CACHE


def fetch_policy(settings: ServerSettings) -> FetchPolicy:
    """How the server fetches benchmark data URLs (size limit, SSRF guard, timeout)."""
    return FetchPolicy(
        max_bytes=settings.benchmark_data_max_bytes,
        allow_private=settings.allow_private_data_urls,
        timeout_s=settings.benchmark_fetch_timeout_s,
    )


def _created(ctx: ServerContext, name: str, version: int | None) -> BenchmarkRow | None:
    """The row of a benchmark created through the API: that version, else the active
    one, else the newest."""
    with ctx.db.read() as session:
        query = select(BenchmarkRow).where(
            BenchmarkRow.name == name, BenchmarkRow.spec.is_not(None)
        )
        if version is not None:
            query = query.where(BenchmarkRow.version == version)
        rows = list(session.scalars(query))
    rows.sort(key=lambda row: (row.active, row.version), reverse=True)
    return rows[0] if rows else None


def loaded(ctx: ServerContext, name: str, version: int | None = None) -> Benchmark:
    """The benchmark object (data verified), loaded once per process.

    ``name`` is a registered name or, for a custom benchmark, its spec's path, or the
    name of a benchmark created through the API (its spec is read from its row, its
    data from the cache or its URL); the object is also remembered under its own
    name, which is what the database and the scheduler use. With ``version``, a
    remembered object of another version is loaded again (a new version created here
    or on another replica).
    """
    known = ctx.loaded_benchmarks.get(name)
    if known is not None and (version is None or known.version == version):
        return known
    row = None if name.endswith((".yaml", ".yml", ".json")) else _created(ctx, name, version)
    if row is not None and row.spec is not None:
        bench: Benchmark = benchmark_from_spec(
            parse_spec(row.spec, f"benchmark {name} v{row.version}"),
            BenchmarkContext(ctx.datasets_dir),
            policy=fetch_policy(ctx.settings),
            cache_dir=data_cache_dir(ctx.settings),
        )
        ctx.loaded_benchmarks[name] = bench
        return bench
    bench = load_benchmark(name, BenchmarkContext(ctx.datasets_dir))
    ctx.loaded_benchmarks[name] = bench
    ctx.loaded_benchmarks.setdefault(bench.name, bench)
    return bench


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
    """Register each benchmark's current version (idempotent); the others that settings
    once named become inactive. Benchmarks created through the API are left as they are
    (active until retired); a setting naming one of theirs is a ConfigError.

    Rebuilds the leaderboard aggregates, in the same transaction, if they were computed
    with other active benchmarks or weights (a fresh database has none to rebuild).
    """
    rows = []
    pillars = {name: pillar_of(ctx, loaded(ctx, name)) for name in names}  # before writing
    created_pillars = _created_pillars(ctx)  # may fetch data: outside the transaction
    with ctx.db.write() as session:
        current = set()
        for name in names:
            bench = loaded(ctx, name)
            taken = session.scalars(
                select(BenchmarkRow.id).where(
                    BenchmarkRow.name == bench.name, BenchmarkRow.spec.is_not(None)
                )
            ).first()
            if taken is not None:
                raise ConfigError(
                    f"the benchmarks setting names {bench.name!r}, which an account created "
                    "through the API: rename the one in the settings"
                )
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
        configured = select(BenchmarkRow).where(BenchmarkRow.active, BenchmarkRow.spec.is_(None))
        for row in session.scalars(configured):
            if row.id not in current:
                row.active = False
        created = select(BenchmarkRow).where(BenchmarkRow.active, BenchmarkRow.spec.is_not(None))
        for row in session.scalars(created):
            row.pillar = created_pillars.get((row.name, row.version))
            if row.pillar is not None:
                pillars[row.name] = row.pillar
        session.flush()
        fill_chance_sums(ctx, session)
        sync_aggregates(ctx, session)
        backfill(ctx, session)  # the ask cache: DONE tasks it does not hold yet
    _warn_uncovered(ctx, set(pillars.values()))
    return rows


def _created_pillars(ctx: ServerContext) -> dict[tuple[str, int], str | None]:
    """The pillar of each active benchmark created through the API, by (name, version).

    Each is loaded (data from the cache, else its URL) so that its tasks' chance levels
    are known when they are finalized. Data that cannot be had now is logged, not
    fatal: the scheduler leaves the benchmark out until it loads (its spec still names
    the pillar).
    """
    with ctx.db.read() as session:
        rows = session.execute(
            select(BenchmarkRow.name, BenchmarkRow.version, BenchmarkRow.spec).where(
                BenchmarkRow.active, BenchmarkRow.spec.is_not(None)
            )
        ).all()
    found: dict[tuple[str, int], str | None] = {}
    for name, version, spec in rows:
        try:
            found[(name, version)] = pillar_of(ctx, loaded(ctx, name, version))
        except QuorumError as exc:
            event(
                log,
                "benchmark.unavailable",
                level=logging.WARNING,
                benchmark=name,
                version=version,
                reason=str(exc)[:300],
            )
            spec_pillar = (spec or {}).get("pillar")
            found[(name, version)] = ctx.settings.pillars.get(name) or (
                str(spec_pillar) if spec_pillar else None
            )
    return found


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
