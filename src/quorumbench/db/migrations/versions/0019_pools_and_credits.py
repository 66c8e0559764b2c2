"""pools and credits

The credits ledger: ``ledger_balances`` (a holder's materialised balance, never
negative but issuance's) and ``ledger_entries`` (append-only lines; a transfer is two
lines of one ``txn_id`` summing to zero). Prize pools: ``pools``, the models entered
(``pool_entries``), the board at each period (``pool_snapshots``) and the settlement
(``pool_payouts``). See ``db/pool_models.py``.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 17:40:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _utc(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, quorumbench.db.types.UTCDateTime(), nullable=nullable)


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "ledger_balances",
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("balance", sa.BigInteger(), nullable=False),
        _utc("updated_at"),
        sa.CheckConstraint(
            "balance >= 0 OR holder = 'issuance'",
            name=op.f("ck_ledger_balances_balance_not_negative"),
        ),
        sa.PrimaryKeyConstraint("holder", name=op.f("pk_ledger_balances")),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("txn_id", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("balance_after", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=True),
        sa.Column("memo", sa.String(length=500), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        _utc("created_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    op.create_index("ix_ledger_entries_holder", "ledger_entries", ["holder", "id"])
    op.create_index("ix_ledger_entries_pool", "ledger_entries", ["pool_id", "id"])
    op.create_index("ix_ledger_entries_txn", "ledger_entries", ["txn_id"])

    op.create_table(
        "pools",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("funder_id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("benchmarks", sa.JSON(), nullable=False),
        sa.Column("funds", sa.BigInteger(), nullable=False),
        sa.Column("rule", sa.String(length=32), nullable=False),
        sa.Column("rule_params", sa.JSON(), nullable=False),
        sa.Column("ties", sa.String(length=16), nullable=False),
        _utc("starts_at"),
        _utc("ends_at"),
        _utc("join_deadline"),
        sa.Column("eligibility", sa.JSON(), nullable=False),
        sa.Column("entries_per_account", sa.Integer(), nullable=False),
        sa.Column("period_s", sa.Integer(), nullable=False),
        sa.Column("final_sha256", sa.String(length=64), nullable=True),
        sa.Column("final_url", sa.String(length=2000), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        _utc("joins_closed_at", nullable=True),
        _utc("ended_at", nullable=True),
        sa.Column("final_standing", sa.JSON(), nullable=True),
        _utc("standing_at", nullable=True),
        _utc("settle_after", nullable=True),
        _utc("settled_at", nullable=True),
        _utc("cancelled_at", nullable=True),
        sa.Column("cancel_reason", sa.String(length=500), nullable=True),
        _utc("created_at"),
        sa.ForeignKeyConstraint(
            ["funder_id"], ["accounts.id"], name=op.f("fk_pools_funder_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pools")),
    )
    op.create_index("ix_pools_status_ends", "pools", ["status", "ends_at"])

    op.create_table(
        "pool_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("weights_key", sa.String(length=600), nullable=False),
        _utc("joined_at"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_pool_entries_account_id_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_pool_entries_model_id_models")
        ),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_pool_entries_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_entries")),
        sa.UniqueConstraint("pool_id", "model_id", name=op.f("uq_pool_entries_pool_id_model_id")),
        sa.UniqueConstraint(
            "pool_id", "weights_key", name=op.f("uq_pool_entries_pool_id_weights_key")
        ),
    )
    op.create_index("ix_pool_entries_account", "pool_entries", ["pool_id", "account_id"])

    op.create_table(
        "pool_payouts",
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("log_index", sa.Integer(), nullable=False),
        _utc("settled_at"),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_pool_payouts_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pool_id", name=op.f("pk_pool_payouts")),
    )
    op.create_table(
        "pool_snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("standing", sa.JSON(), nullable=False),
        _utc("taken_at"),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_pool_snapshots_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_snapshots")),
        sa.UniqueConstraint("pool_id", "period", name=op.f("uq_pool_snapshots_pool_id_period")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("pool_snapshots")
    op.drop_table("pool_payouts")
    op.drop_index("ix_pool_entries_account", table_name="pool_entries")
    op.drop_table("pool_entries")
    op.drop_index("ix_pools_status_ends", table_name="pools")
    op.drop_table("pools")
    op.drop_index("ix_ledger_entries_txn", table_name="ledger_entries")
    op.drop_index("ix_ledger_entries_pool", table_name="ledger_entries")
    op.drop_index("ix_ledger_entries_holder", table_name="ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_table("ledger_balances")
