"""result measurements: what the runner measured around an evaluation

``results.measurements`` (JSON, nullable) holds a result's signed
``protocol.Measurements`` (energy with its method, CO2 with its intensity, tokens,
time to first token, decode rate, peak memory): hardware data, logged with the
result and never part of consensus. Null for results sent without them (every result
before protocol 1.1). Added in place (no table copy on SQLite).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26 22:30:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("results", sa.Column("measurements", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema: the column goes (as 0010's predictions do). Final tasks' entries
    in the public log keep their results' measurements; a result of a task still open
    loses them, and its signature (which covers them) will not verify from the log."""
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("measurements")
