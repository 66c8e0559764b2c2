"""idempotency keys: a retried request that moves credits does it once

``idempotency_keys`` holds, per account and action (``pool:create``,
``ledger:mint``), each ``Idempotency-Key`` sent with a request that did something:
the SHA-256 of the request and what it made (``services/idempotency.py``). One row
per (account, action, key).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26 22:40:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "idempotency_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_idempotency_keys_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_keys")),
        sa.UniqueConstraint(
            "account_id", "action", "key", name=op.f("uq_idempotency_keys_account_id_action_key")
        ),
    )


def downgrade() -> None:
    """Downgrade schema (the keys only prevent repeats: dropping them loses no data)."""
    op.drop_table("idempotency_keys")
