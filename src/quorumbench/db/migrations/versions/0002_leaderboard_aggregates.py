"""leaderboard aggregates

One row per model with its weighted aggregate over the active benchmarks, kept
current by the server instead of computed on every read; backfilled here from the
per-benchmark rows, so an existing database ranks the same models after upgrading.
Indexes so that every sort key of both boards pages through an index: per aggregate
sort key, per benchmark sort key, and the models' names.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:00:00.000000

"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types
from quorumbench.core.leaderboard import (
    BenchmarkPart,
    Interval,
    aggregate_basis,
    model_aggregate,
)

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXED = ("score", "ci_low", "n_samples", "updated_at")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "leaderboard_aggregates",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("n_benchmarks", sa.Integer(), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("n_tasks", sa.Integer(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("stderr", sa.Float(), nullable=False),
        sa.Column("ci_low", sa.Float(), nullable=False),
        sa.Column("ci_high", sa.Float(), nullable=False),
        sa.Column("updated_at", quorumbench.db.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("basis", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_leaderboard_aggregates_model_id_models")
        ),
        sa.PrimaryKeyConstraint("model_id", name=op.f("pk_leaderboard_aggregates")),
    )
    with op.batch_alter_table("leaderboard_aggregates", schema=None) as batch_op:
        for column in INDEXED:
            batch_op.create_index(
                f"ix_leaderboard_aggregates_{column}",
                ["complete", column, "model_id"],
                unique=False,
            )
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        for column in INDEXED[1:]:  # (benchmark_id, score) has its index since 0001
            batch_op.create_index(
                f"ix_leaderboard_benchmark_{column}",
                ["benchmark_id", column, "model_id"],
                unique=False,
            )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index("ix_models_name", ["name", "id"], unique=False)
    if not op.get_context().as_sql:  # offline SQL: the server's startup check fills it
        _backfill(op.get_bind())


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index("ix_models_name")
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        for column in reversed(INDEXED[1:]):
            batch_op.drop_index(f"ix_leaderboard_benchmark_{column}")
    with op.batch_alter_table("leaderboard_aggregates", schema=None) as batch_op:
        for column in reversed(INDEXED):
            batch_op.drop_index(f"ix_leaderboard_aggregates_{column}")
    op.drop_table("leaderboard_aggregates")


def _backfill(bind: Any) -> None:
    """One aggregate row per model with rows on active benchmarks (as the server's rebuild)."""
    benchmarks = sa.table(
        "benchmarks",
        sa.column("id", sa.Integer()),
        sa.column("weight", sa.Float()),
        sa.column("active", sa.Boolean()),
    )
    entries = sa.table(
        "leaderboard_entries",
        *(
            sa.column(name, sa.Integer())
            for name in ("model_id", "benchmark_id", "n_samples", "n_tasks")
        ),
        *(sa.column(name, sa.Float()) for name in ("score", "stderr", "ci_low", "ci_high")),
        sa.column("updated_at", quorumbench.db.types.UTCDateTime(timezone=True)),
    )
    aggregates = sa.table(
        "leaderboard_aggregates",
        *(
            sa.column(name, sa.Integer())
            for name in ("model_id", "n_benchmarks", "n_tasks", "n_samples")
        ),
        sa.column("complete", sa.Boolean()),
        *(sa.column(name, sa.Float()) for name in ("score", "stderr", "ci_low", "ci_high")),
        sa.column("updated_at", quorumbench.db.types.UTCDateTime(timezone=True)),
        sa.column("basis", sa.String(64)),
    )
    weights: dict[int, float] = dict(
        bind.execute(
            sa.select(benchmarks.c.id, benchmarks.c.weight).where(benchmarks.c.active == sa.true())
        ).all()
    )
    basis = aggregate_basis(weights)
    by_model: dict[int, list[BenchmarkPart]] = {}
    for row in bind.execute(sa.select(entries).where(entries.c.benchmark_id.in_(weights))):
        by_model.setdefault(row.model_id, []).append(
            BenchmarkPart(
                weights[row.benchmark_id],
                Interval(row.score, row.stderr, row.ci_low, row.ci_high),
                row.n_samples,
                row.n_tasks,
                row.updated_at,
            )
        )
    rows = []
    for model_id, parts in sorted(by_model.items()):
        agg = model_aggregate(parts, len(weights))
        rows.append(
            {
                "model_id": model_id,
                "n_benchmarks": agg.n_benchmarks,
                "complete": agg.complete,
                "n_tasks": agg.n_tasks,
                "n_samples": agg.n_samples,
                "score": agg.interval.score,
                "stderr": agg.interval.stderr,
                "ci_low": agg.interval.ci_low,
                "ci_high": agg.interval.ci_high,
                "updated_at": agg.updated_at,
                "basis": basis,
            }
        )
    if rows:
        bind.execute(aggregates.insert(), rows)
