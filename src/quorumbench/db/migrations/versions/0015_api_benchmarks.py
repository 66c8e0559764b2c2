"""benchmarks created through the API, and account grants

``POST /v0/benchmarks`` stores a custom spec (``benchmarks.spec``) whose data is
referenced by URL (``source_url``) and pinned by the SHA-256 already kept in
``dataset_sha256``; ``owner_id`` is the account that created it, ``first_epoch`` the
first epoch it is scheduled in, ``retired_at`` when its owner or an admin retired it.
``account_grants`` records, append-only, each grant and revocation of a permission
beyond token scopes (``benchmark:create``: automatic after enough accepted
evaluations agreeing with consensus, or by an admin).

Revision ID: 0015
Revises: 0013 (rechained onto 0014 at merge)
Create Date: 2026-11-26 11:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("spec", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("source_url", sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("first_epoch", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("retired_at", quorumbench.db.types.UTCDateTime(), nullable=True)
        )
    op.create_table(
        "account_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("permission", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=8), nullable=False),
        sa.Column("by_account_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_account_grants_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["by_account_id"],
            ["accounts.id"],
            name=op.f("fk_account_grants_by_account_id_accounts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_account_grants")),
    )
    op.create_index(
        "ix_account_grants_account_permission",
        "account_grants",
        ["account_id", "permission"],
        unique=False,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_account_grants_account_permission", table_name="account_grants")
    op.drop_table("account_grants")
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy of ``benchmarks``
    # would drop a table that tasks still reference.
    for column in ("retired_at", "first_epoch", "owner_id", "source_url", "spec"):
        op.drop_column("benchmarks", column)
