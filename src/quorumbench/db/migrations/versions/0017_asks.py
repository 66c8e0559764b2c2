"""asks and their public plans

``plans`` keeps each public plan (no endpoints, never a key) by its id, the SHA-256
of its canonical JSON; ``asks`` keeps each ask: its plan, the planner's report, the
endpoints' URLs and model names (never a key), status, progress and the endpoints'
live results (for their owner only).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 14:30:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "plans",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plans")),
    )
    op.create_table(
        "asks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("plan_id", sa.String(length=64), nullable=False),
        sa.Column("query", sa.String(length=2000), nullable=True),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("endpoints", sa.JSON(), nullable=False),
        sa.Column("n_endpoints", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=2000), nullable=True),
        sa.Column("results", sa.JSON(), nullable=True),
        sa.Column("deepen", sa.JSON(), nullable=True),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("started_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.Column("finished_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["accounts.id"],
            name=op.f("fk_asks_owner_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name=op.f("fk_asks_plan_id_plans")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asks")),
    )
    op.create_index("ix_asks_owner_created", "asks", ["owner_id", "created_at"], unique=False)
    op.create_index("ix_asks_status", "asks", ["status"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_asks_status", table_name="asks")
    op.drop_index("ix_asks_owner_created", table_name="asks")
    op.drop_table("asks")
    op.drop_table("plans")
