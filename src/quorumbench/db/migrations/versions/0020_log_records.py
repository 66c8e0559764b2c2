"""log records that are not tasks: ``log_entries.task_id`` may be null

The public log holds, besides finalized tasks, the payout record of each settled
prize pool (``services/pool_ticks.py``): an entry with a top-level ``payout`` key and
no task. Its row has no ``task_id``; the unique constraint on ``task_id`` still makes
every task appear once (both databases let several rows hold NULL there).

On SQLite the column change copies the table (``batch_alter_table``); nothing
references ``log_entries``.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 18:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("log_entries", schema=None) as batch_op:
        batch_op.alter_column("task_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    """Downgrade schema (refused while the log holds payout records: a log entry is
    never removed, and those rows have no task)."""
    records = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM log_entries WHERE task_id IS NULL"))
        .scalar()
    )
    if records:
        raise RuntimeError(
            f"the public log holds {records} record(s) that are not tasks (pool payouts): "
            "a log entry is never removed, so this schema cannot go back before 0020"
        )
    with op.batch_alter_table("log_entries", schema=None) as batch_op:
        batch_op.alter_column("task_id", existing_type=sa.Integer(), nullable=False)
