"""auth sessions and federated identities

Login sessions behind the server's short-lived access JWTs (their refresh tokens,
hashed), and accounts' identities at OIDC issuers.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "auth_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("refresh_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.String(length=256), nullable=False),
        sa.Column("via", sa.String(length=300), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("expires_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_auth_sessions_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_auth_sessions")),
        sa.UniqueConstraint("refresh_hash", name=op.f("uq_auth_sessions_refresh_hash")),
    )
    op.create_table(
        "federated_identities",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("issuer", sa.String(length=300), nullable=False),
        sa.Column("subject", sa.String(length=300), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_federated_identities_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_federated_identities")),
        sa.UniqueConstraint(
            "issuer", "subject", name=op.f("uq_federated_identities_issuer_subject")
        ),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("federated_identities")
    op.drop_table("auth_sessions")
