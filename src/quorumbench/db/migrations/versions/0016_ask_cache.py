"""the ask cache: per (label set, model) sums of consensus-verified samples

``label_sets`` holds each (benchmark version, label combination) of the samples the
cache has seen, plus one total set per benchmark (every label ``*``);
``label_aggregates`` a model's running sums per set (samples, score sum, chance
sum, newest finalize time), with a covering index for the ask's grouped read;
``label_cached_tasks`` the DONE tasks already counted there. The tables start
empty: the server's next startup folds in the DONE tasks finalized before this
revision (``services/label_cache.py``), since labels come from the benchmark data
the server loads, which a migration does not.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 14:30:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "label_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("skill", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("target", sa.String(length=32), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("language", sa.String(length=8), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"], ["benchmarks.id"], name=op.f("fk_label_sets_benchmark_id_benchmarks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_label_sets")),
        sa.UniqueConstraint(
            "benchmark_id",
            "skill",
            "subject",
            "target",
            "format",
            "language",
            name=op.f("uq_label_sets_benchmark_id_skill_subject_target_format_language"),
        ),
    )
    op.create_table(
        "label_aggregates",
        sa.Column("label_set_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("sample_sum", sa.Float(), nullable=False),
        sa.Column("chance_sum", sa.Float(), nullable=False),
        sa.Column("updated_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["label_set_id"],
            ["label_sets.id"],
            name=op.f("fk_label_aggregates_label_set_id_label_sets"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_label_aggregates_model_id_models")
        ),
        sa.PrimaryKeyConstraint("label_set_id", "model_id", name=op.f("pk_label_aggregates")),
    )
    op.create_index(
        "ix_label_aggregates_covering",
        "label_aggregates",
        [
            "label_set_id",
            "model_id",
            "benchmark_id",
            "n_samples",
            "sample_sum",
            "chance_sum",
            "updated_at",
        ],
        unique=False,
    )
    op.create_table(
        "label_cached_tasks",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("cached_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_label_cached_tasks_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_label_cached_tasks")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("label_cached_tasks")
    op.drop_index("ix_label_aggregates_covering", table_name="label_aggregates")
    op.drop_table("label_aggregates")
    op.drop_table("label_sets")
