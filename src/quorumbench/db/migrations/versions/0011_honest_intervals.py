"""honest intervals

The leaderboard's 95% intervals become exact (Clopper–Pearson) limits, and the
aggregate's the MOVER combination of its benchmarks' (``core/intervals.py``), in
place of ``mean ± 1.96·se``, which shrinks to a point when a few samples agree. No
column changes: every stored row's ``ci_low`` and ``ci_high`` (and ``stderr``) are
recomputed from its running sums, as the server now computes them at finalization,
and every aggregate row is rebuilt from them, as the server's rebuild does.
Downgrading puts back the intervals of before, from the same sums.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-09 10:00:00.000000

"""

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types
from quorumbench.core.leaderboard import (
    Accumulator,
    BenchmarkPart,
    Interval,
    aggregate_basis,
    interval,
    model_aggregate,
)

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FLOATS = ("score", "stderr", "ci_low", "ci_high")
_ENTRIES = sa.table(
    "leaderboard_entries",
    *(sa.column(name, sa.Integer()) for name in ("model_id", "benchmark_id", "n_tasks")),
    sa.column("n_samples", sa.Integer()),
    *(sa.column(name, sa.Float()) for name in ("weighted_sum", "sample_sum", "sample_sumsq")),
    *(sa.column(name, sa.Float()) for name in _FLOATS),
    sa.column("updated_at", quorumbench.db.types.UTCDateTime(timezone=True)),
)
_AGGREGATES = sa.table(
    "leaderboard_aggregates",
    *(sa.column(name, sa.Integer()) for name in ("model_id", "n_benchmarks", "n_tasks")),
    sa.column("n_samples", sa.Integer()),
    sa.column("complete", sa.Boolean()),
    *(sa.column(name, sa.Float()) for name in _FLOATS),
    sa.column("updated_at", quorumbench.db.types.UTCDateTime(timezone=True)),
    sa.column("basis", sa.String(64)),
)
_BENCHMARKS = sa.table(
    "benchmarks",
    sa.column("id", sa.Integer()),
    sa.column("weight", sa.Float()),
    sa.column("active", sa.Boolean()),
)


_SCORE_INDEXES = (
    # (table, index, leading column): the columns after it were (score) and
    # (score, model_id) before, and are (score, model_id, ci_low, ci_high) now
    ("leaderboard_entries", "ix_leaderboard_benchmark_score", "benchmark_id", ["score"]),
    (
        "leaderboard_aggregates",
        "ix_leaderboard_aggregates_score",
        "complete",
        ["score", "model_id"],
    ),
)
_COVERING = ["score", "model_id", "ci_low", "ci_high"]


def upgrade() -> None:
    """Upgrade schema."""
    for table, index, leading, _ in _SCORE_INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(index)
            batch_op.create_index(index, [leading, *_COVERING], unique=False)
    if not op.get_context().as_sql:  # offline SQL has no rows to recompute
        _recompute(op.get_bind(), interval, model_aggregate)


def downgrade() -> None:
    """Downgrade schema."""
    if not op.get_context().as_sql:
        _recompute(op.get_bind(), _normal_interval, _normal_aggregate)
    for table, index, leading, before in _SCORE_INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(index)
            batch_op.create_index(index, [leading, *before], unique=False)


Entry = Callable[[Accumulator], Interval]
Aggregate = Callable[[Sequence[BenchmarkPart], int], Any]


def _recompute(bind: Any, entry: Entry, aggregate: Aggregate) -> None:
    """Every per-benchmark row's interval from its sums, then every aggregate row."""
    rows = bind.execute(sa.select(_ENTRIES)).all()
    keyed = sa.and_(
        _ENTRIES.c.model_id == sa.bindparam("model_id_"),
        _ENTRIES.c.benchmark_id == sa.bindparam("benchmark_id_"),
    )
    updates = []
    stats: dict[tuple[int, int], Interval] = {}
    for row in rows:
        acc = Accumulator(
            row.n_tasks, row.n_samples, row.weighted_sum, row.sample_sum, row.sample_sumsq
        )
        if acc.n_samples == 0:
            continue
        stats[(row.model_id, row.benchmark_id)] = found = entry(acc)
        updates.append(
            {
                "model_id_": row.model_id,
                "benchmark_id_": row.benchmark_id,
                **{name: getattr(found, name) for name in _FLOATS},
            }
        )
    if updates:
        bind.execute(_ENTRIES.update().where(keyed), updates)  # SET: the keys named as columns
    weights: dict[int, float] = dict(
        bind.execute(
            sa.select(_BENCHMARKS.c.id, _BENCHMARKS.c.weight).where(_BENCHMARKS.c.active)
        ).all()
    )
    by_model: dict[int, list[BenchmarkPart]] = {}
    for row in rows:
        if row.benchmark_id in weights and (row.model_id, row.benchmark_id) in stats:
            by_model.setdefault(row.model_id, []).append(
                BenchmarkPart(
                    weights[row.benchmark_id],
                    stats[(row.model_id, row.benchmark_id)],
                    row.n_samples,
                    row.n_tasks,
                    row.updated_at,
                )
            )
    basis = aggregate_basis(weights)
    made = []
    for model_id, parts in sorted(by_model.items()):
        agg = aggregate(parts, len(weights))
        made.append(
            {
                "model_id": model_id,
                "n_benchmarks": agg.n_benchmarks,
                "complete": agg.complete,
                "n_tasks": agg.n_tasks,
                "n_samples": agg.n_samples,
                **{name: getattr(agg.interval, name) for name in _FLOATS},
                "updated_at": agg.updated_at,
                "basis": basis,
            }
        )
    bind.execute(_AGGREGATES.delete())
    if made:
        bind.execute(_AGGREGATES.insert(), made)


# --- the intervals before this revision (for the downgrade), as 0010's code made them ---

_Z95 = 1.959963984540054


def _normal_interval(acc: Accumulator) -> Interval:
    n = acc.n_samples
    mean = acc.weighted_sum / n
    if n > 1:
        variance = max(0.0, (acc.sample_sumsq - acc.sample_sum**2 / n) / (n - 1))
        stderr = math.sqrt(variance / n)
    else:
        stderr = 0.0
    return Interval(mean, stderr, max(0.0, mean - _Z95 * stderr), min(1.0, mean + _Z95 * stderr))


def _normal_aggregate(parts: Sequence[BenchmarkPart], n_active: int) -> Any:
    """:func:`model_aggregate` with the weighted aggregate's interval of before."""
    made = model_aggregate(parts, n_active)
    total = math.fsum(p.weight for p in parts)
    if total <= 0:
        return made
    mean = math.fsum(p.weight * p.interval.score for p in parts) / total
    stderr = math.sqrt(math.fsum((p.weight * p.interval.stderr) ** 2 for p in parts)) / total
    low, high = max(0.0, mean - _Z95 * stderr), min(1.0, mean + _Z95 * stderr)
    return replace(made, interval=Interval(mean, stderr, low, high))
