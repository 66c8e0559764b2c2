"""retired models and model families

An owner (or an admin) retires a model: ``models.retired_at`` is set (and ``active``
cleared), and the model leaves the board and the schedule while its tasks, results
and log entries stay. The boards leave out the few retired models through
``ix_models_retired_at``. ``models.family`` keeps the architecture family the
submission named or registration detected.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-10 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("retired_at", quorumbench.db.types.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(sa.Column("family", sa.String(length=64), nullable=True))
    op.create_index("ix_models_retired_at", "models", ["retired_at"], unique=False)
    # what registration now detects, for the models before: config.json's model_type,
    # a GGUF file's architecture
    model_type = (
        "details->>'model_type'"
        if op.get_bind().dialect.name == "postgresql"
        else "json_extract(details, '$.model_type')"
    )
    op.execute(
        f"UPDATE models SET family = substr(COALESCE({model_type}, CASE WHEN ref LIKE "
        "'gguf:%' OR ref LIKE 'bundled:%' THEN architecture END), 1, 64)"
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_models_retired_at", table_name="models")
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy of ``models`` would
    # drop a table that tasks still reference.
    op.drop_column("models", "family")
    op.drop_column("models", "retired_at")
