"""signed results

Runners' Ed25519 public keys (rotated and revoked per runner), and each result's
signature, signing key and signing time, and the model revision it reported (the
last field of the signed payload that was not stored). Results stored before this
migration have none.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "runner_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["runner_id"], ["runners.id"], name=op.f("fk_runner_keys_runner_id_runners")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runner_keys")),
        sa.UniqueConstraint("key_id", name=op.f("uq_runner_keys_key_id")),
    )
    with op.batch_alter_table("runner_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runner_keys_runner_id"), ["runner_id"], unique=False)
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_revision", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("key_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("signed_at", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("signature", sa.String(length=128), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_column("signature")
        batch_op.drop_column("signed_at")
        batch_op.drop_column("key_id")
        batch_op.drop_column("model_revision")
    with op.batch_alter_table("runner_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runner_keys_runner_id"))
    op.drop_table("runner_keys")
