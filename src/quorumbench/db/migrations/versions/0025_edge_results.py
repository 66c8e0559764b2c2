"""edge tasks: one per (model, edge benchmark, epoch), and their runners' reports

``uq_tasks_edge_epoch`` makes the scheduler's edge tasks (``purpose = 'edge'``) unique
per model, edge benchmark and epoch. ``edge_results`` holds each runner's signed edge
report (``protocol.EdgeReport``) with its hardware class: hardware data that no
score, consensus or reputation reads (``services/edge_results.py``).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 06:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    where = sa.text("purpose = 'edge'")
    op.create_index(
        "uq_tasks_edge_epoch",
        "tasks",
        ["model_id", "benchmark_id", "epoch_id"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )
    op.create_table(
        "edge_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("hardware_class", sa.String(length=200), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("payload_sha256", sa.String(length=64), nullable=False),
        sa.Column("counted", sa.Boolean(), nullable=False),
        sa.Column("submitted_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=True),
        sa.Column("signed_at", sa.String(length=40), nullable=True),
        sa.Column("signature", sa.String(length=128), nullable=True),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_edge_results_account_id_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["lease_id"], ["leases.id"], name=op.f("fk_edge_results_lease_id_leases")
        ),
        sa.ForeignKeyConstraint(
            ["runner_id"], ["runners.id"], name=op.f("fk_edge_results_runner_id_runners")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_edge_results_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_edge_results")),
        sa.UniqueConstraint("lease_id", name=op.f("uq_edge_results_lease_id")),
        sa.UniqueConstraint(
            "task_id", "account_id", name=op.f("uq_edge_results_task_id_account_id")
        ),
    )
    op.create_index("ix_edge_results_task_id", "edge_results", ["task_id"])
    op.create_index("ix_edge_results_runner_id", "edge_results", ["runner_id"])
    op.create_index("ix_edge_results_hardware_class", "edge_results", ["hardware_class"])


def downgrade() -> None:
    """Downgrade schema: refused while edge tasks exist (their reports would go, and
    the older schema cannot tell an edge task from a scored one)."""
    bind = op.get_bind()
    edge_tasks = bind.execute(sa.text("SELECT count(*) FROM tasks WHERE purpose = 'edge'"))
    if edge_tasks.scalar_one():
        raise RuntimeError(
            "edge tasks exist: downgrading below 0025 would drop their runners' reports "
            "and leave tasks the older code takes for scored ones; it is refused"
        )
    op.drop_index("ix_edge_results_hardware_class", table_name="edge_results")
    op.drop_index("ix_edge_results_runner_id", table_name="edge_results")
    op.drop_index("ix_edge_results_task_id", table_name="edge_results")
    op.drop_table("edge_results")
    op.drop_index("uq_tasks_edge_epoch", table_name="tasks")
