"""prediction digests

A result carries, besides the SHA-256 of each raw output, the canonical per-sample
predictions (the chosen option, the extracted answer) and their digest, which are the
same whatever the batch size or backend path that produced them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("predictions_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("sample_predictions", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_column("results", "sample_predictions")
    op.drop_column("results", "predictions_sha256")
