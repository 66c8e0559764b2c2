"""web sessions

The site's sign-in: server-side sessions behind an opaque cookie (its SHA-256, the
account, scopes and the session's CSRF token), and the one-time nonces of the forms
posted in them (a form posted twice acts once).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-10 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.String(length=256), nullable=False),
        sa.Column("via", sa.String(length=300), nullable=False),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("expires_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", quorumbench.db.types.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_web_sessions_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_web_sessions_token_hash")),
    )
    op.create_table(
        "web_form_uses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=True),
        sa.Column("sealed", sa.String(length=512), nullable=True),
        sa.Column("created_at", quorumbench.db.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["web_sessions.id"],
            name=op.f("fk_web_form_uses_session_id_web_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_form_uses")),
        sa.UniqueConstraint("session_id", "nonce", name=op.f("uq_web_form_uses_session_id_nonce")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("web_form_uses")
    op.drop_table("web_sessions")
