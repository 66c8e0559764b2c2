"""failed leases and canary tasks

A runner that cannot evaluate a task (its sandbox killed the evaluation, the model
does not load, its data differs) reports the lease FAILED with a reason; the reason
is kept on the lease. A canary task keeps, hidden from runners until it is final,
the per-sample answers it is checked against and the finalized tasks they come from.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure", sa.String(length=500), nullable=True))
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("canary", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy of ``tasks`` would
    # drop a table that leases and results still reference.
    op.drop_column("tasks", "canary")
    op.drop_column("leases", "failure")
