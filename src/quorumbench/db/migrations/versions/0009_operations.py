"""paused models and log key rotations

A model whose tasks keep failing is paused, with the reason, until its owner resumes
it. The public log remembers which key signs its next tree head (``log_state.key_id``,
filled from the newest head) so a server started with another key refuses to start,
and keeps every key rotation: a statement naming the old and the new key and the tree
head at which the new key takes over, signed by both.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("paused_at", quorumbench.db.types.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(sa.Column("paused_reason", sa.String(length=1000), nullable=True))
    with op.batch_alter_table("log_state", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_id", sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE log_state SET key_id = (SELECT key_id FROM tree_heads ORDER BY size DESC LIMIT 1)"
    )
    op.create_table(
        "log_key_rotations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("root", sa.String(length=64), nullable=False),
        sa.Column("timestamp", sa.String(length=40), nullable=False),
        sa.Column("old_key_id", sa.String(length=64), nullable=False),
        sa.Column("old_public_key", sa.String(length=64), nullable=False),
        sa.Column("new_key_id", sa.String(length=64), nullable=False),
        sa.Column("new_public_key", sa.String(length=64), nullable=False),
        sa.Column("old_signature", sa.String(length=128), nullable=False),
        sa.Column("new_signature", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_key_rotations")),
        sa.UniqueConstraint("old_key_id", name=op.f("uq_log_key_rotations_old_key_id")),
        sa.UniqueConstraint("new_key_id", name=op.f("uq_log_key_rotations_new_key_id")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("log_key_rotations")
    op.drop_column("log_state", "key_id")
    op.drop_column("models", "paused_reason")
    op.drop_column("models", "paused_at")
