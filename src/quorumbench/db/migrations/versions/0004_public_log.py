"""public log

The append-only log of finalized tasks (RFC 6962 Merkle tree): its entries, a signed
tree head per size, and the single state row that appends lock in turn. Tasks that
finalized before this migration are not in the log.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "log_entries",
        sa.Column("leaf_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("leaf_hash", sa.String(length=64), nullable=False),
        sa.Column("entry", sa.JSON(), nullable=False),
        sa.Column("appended_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_log_entries_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("leaf_index", name=op.f("pk_log_entries")),
        sa.UniqueConstraint("task_id", name=op.f("uq_log_entries_task_id")),
    )
    op.create_table(
        "tree_heads",
        sa.Column("size", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("root", sa.String(length=64), nullable=False),
        sa.Column("timestamp", sa.String(length=40), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("size", name=op.f("pk_tree_heads")),
    )
    log_state = op.create_table(
        "log_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("frontier", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_state")),
    )
    op.bulk_insert(log_state, [{"id": 1, "size": 0, "frontier": []}])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("log_state")
    op.drop_table("tree_heads")
    op.drop_table("log_entries")
