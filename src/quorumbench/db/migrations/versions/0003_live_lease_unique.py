"""one live lease per task and account

A unique partial index on ``leases (task_id, account_id)`` over active and
submitted leases. The claim query already skips tasks where the account holds such a
lease; the index makes that a guarantee that concurrent claims on PostgreSQL cannot
slip past (the claim is retried on a fresh snapshot instead).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE_LEASE = "state IN ('ACTIVE', 'SUBMITTED')"


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index(
            "uq_leases_live_task_account",
            ["task_id", "account_id"],
            unique=True,
            postgresql_where=sa.text(LIVE_LEASE),
            sqlite_where=sa.text(LIVE_LEASE),
        )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_leases_live_task_account",
            postgresql_where=sa.text(LIVE_LEASE),
            sqlite_where=sa.text(LIVE_LEASE),
        )
