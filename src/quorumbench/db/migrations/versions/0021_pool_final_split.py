"""held-out final splits: pools evaluate them, tasks belong to a pool

A pool that committed to a held-out final dataset (``pools.final_sha256``) has it
revealed at its end as a benchmark spec (``final_spec``); the server stores it as a
hidden benchmark (``final_benchmark_id``: never scheduled by epochs, never on the
board) and schedules, for every entry, tasks on it (``tasks.purpose =
'pool_final'``, ``tasks.pool_id``, ``tasks.part``) that runners evaluate through the
normal queue and consensus. ``final_revealed_at``: when it was revealed;
``final_scheduled_at``: when its tasks were made; ``final_deadline``: when the
standing is frozen on whatever has finalized by then (``services/pool_final.py``).

Columns are added in place (nullable, no table copy on SQLite).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 21:50:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import quorumbench.db.types

# revision identifiers, used by Alembic.
revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_POOL_COLUMNS = (
    "final_deadline",
    "final_scheduled_at",
    "final_revealed_at",
    "final_benchmark_id",
    "final_spec",
)


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("tasks", sa.Column("pool_id", sa.Integer(), nullable=True))
    where = sa.text("purpose = 'pool_final'")
    op.create_index(
        "uq_tasks_pool_final_part",
        "tasks",
        ["pool_id", "model_id", "part"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )
    op.add_column("pools", sa.Column("final_spec", sa.JSON(), nullable=True))
    op.add_column("pools", sa.Column("final_benchmark_id", sa.Integer(), nullable=True))
    for name in ("final_revealed_at", "final_scheduled_at", "final_deadline"):
        op.add_column("pools", sa.Column(name, quorumbench.db.types.UTCDateTime(), nullable=True))


def downgrade() -> None:
    """Downgrade schema (refused while held-out tasks exist: they would lose their pool
    and read as epoch-less strays)."""
    held_out = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM tasks WHERE purpose = 'pool_final'"))
        .scalar()
    )
    if held_out:
        raise RuntimeError(
            f"{held_out} held-out pool task(s) exist: a downgrade below 0021 would lose "
            "which pool they evaluate; it is refused"
        )
    op.drop_index("uq_tasks_pool_final_part", table_name="tasks")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("pool_id")
    with op.batch_alter_table("pools", schema=None) as batch_op:
        for name in _POOL_COLUMNS:
            batch_op.drop_column(name)
