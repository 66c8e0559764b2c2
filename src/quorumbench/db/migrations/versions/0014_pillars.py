"""pillars

Pillars and chance correction (core/pillars.py): each benchmark's pillar, the sum of
the chance levels of a task's samples and of a leaderboard row's, and each model's
pillar scores and missing pillars beside its aggregate.

A generative benchmark's items have chance level 0, so its tasks and rows get 0
here. Those of a multiple-choice benchmark stay NULL (not known): the server's next
start fills them in from the benchmark's samples (services/chance.py). The stored
aggregates are deleted; the server's next start rebuilds them with pillars
(``sync_aggregates`` rebuilds when a model has rows but no aggregate).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-12 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pillar", sa.String(length=16), nullable=True))
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chance_sum", sa.Float(), nullable=True))
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chance_sum", sa.Float(), nullable=True))
    op.execute(
        sa.text(
            "UPDATE tasks SET chance_sum = 0 WHERE status = 'DONE' "
            "AND benchmark_id IN (SELECT id FROM benchmarks WHERE kind = 'generate')"
        )
    )
    op.execute(
        sa.text(
            "UPDATE leaderboard_entries SET chance_sum = 0 "
            "WHERE benchmark_id IN (SELECT id FROM benchmarks WHERE kind = 'generate')"
        )
    )
    op.execute(sa.text("DELETE FROM leaderboard_aggregates"))  # rebuilt at the next start
    with op.batch_alter_table("leaderboard_aggregates", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pillars", sa.JSON(), nullable=False))
        batch_op.add_column(sa.Column("missing_pillars", sa.JSON(), nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy of ``tasks`` or
    # ``benchmarks`` would drop a table that other tables still reference.
    op.drop_column("leaderboard_aggregates", "missing_pillars")
    op.drop_column("leaderboard_aggregates", "pillars")
    op.drop_column("leaderboard_entries", "chance_sum")
    op.drop_column("tasks", "chance_sum")
    op.drop_column("benchmarks", "pillar")
