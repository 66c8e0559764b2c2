"""oauth logins

OAuth logins under way (GitHub's code flow with PKCE, and its device flow): the
hash of the state or device handle, the PKCE verifier or device code, expiry and
single use.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "oauth_logins",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("handle_hash", sa.String(length=64), nullable=False),
        sa.Column("secret", sa.String(length=512), nullable=False),
        sa.Column("redirect_uri", sa.String(length=1000), nullable=True),
        sa.Column("interval", sa.Integer(), nullable=True),
        sa.Column("polled_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("expires_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("used_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_logins")),
        sa.UniqueConstraint("handle_hash", name=op.f("uq_oauth_logins_handle_hash")),
    )
    with op.batch_alter_table("oauth_logins", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_oauth_logins_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("oauth_logins", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oauth_logins_expires_at"))
    op.drop_table("oauth_logins")
