"""measurement check: hardware classes, per-task class statistics, outlier flags

``results.hardware_class`` (String(200), nullable, indexed) holds
``core.efficiency.hardware_class`` of the result's machine, set when it is stored; null
for results stored before this revision (the cross-check computes it from
``results.hardware`` then). ``results.measurement_outlier`` (boolean, default false)
marks a result whose energy per sample was more than ``QB_MEASUREMENT_OUTLIER_FACTOR``
off its class's median when its task became DONE. ``task_measurements`` holds, per DONE
task and hardware class, the median and spread (MAD) of the agreeing results'
measurements (``services/measurement_check.py``). None of it is read by consensus,
scores or reputation. Columns are added in place (no table copy on SQLite).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-26 23:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATS = (
    "energy_kwh_per_sample",
    "decode_tokens_per_s",
    "ttft_s",
    "peak_rss_bytes",
)


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("results", sa.Column("hardware_class", sa.String(length=200), nullable=True))
    op.add_column(
        "results",
        sa.Column("measurement_outlier", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.create_index("ix_results_hardware_class", "results", ["hardware_class"])
    op.create_index("ix_results_runner_flagged", "results", ["runner_id", "measurement_outlier"])
    op.create_table(
        "task_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("hardware_class", sa.String(length=200), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        *(
            sa.Column(f"{name}_{part}", sa.Float(), nullable=True)
            for name in _STATS
            for part in ("median", "spread")
        ),
        sa.Column("flagged", sa.Integer(), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_task_measurements_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_measurements")),
        sa.UniqueConstraint(
            "task_id",
            "hardware_class",
            name=op.f("uq_task_measurements_task_id_hardware_class"),
        ),
    )


def downgrade() -> None:
    """Downgrade schema: the statistics and flags go (they are derived: anyone can
    recompute them from the public log's measurements and hardware)."""
    op.drop_table("task_measurements")
    op.drop_index("ix_results_runner_flagged", table_name="results")
    op.drop_index("ix_results_hardware_class", table_name="results")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("measurement_outlier")
        batch_op.drop_column("hardware_class")
