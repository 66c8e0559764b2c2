"""deepen tasks: a task's purpose, plan and part

A task is either drawn by its epoch's seed (``purpose = 'epoch'``, the public board's)
or deepens a plan's slice (``'deepen'``, ``services/deepen.py``): extra samples chosen
by label for a thin model, with the plan's id (``plan_id``), the task's number among
that plan's tasks of its (model, benchmark) (``part``) and the account that asked
(``requested_by``). The unique (model, benchmark, epoch) constraint becomes a partial
unique index over epoch tasks, beside one over deepen tasks' (plan, model, benchmark,
part); a plain (model, benchmark) index keeps the lookups the constraint served.

On SQLite dropping a constraint copies the table; ``db/migrate.py`` turns foreign keys
off around migrations there (tasks are referenced by leases, results, outcomes and the
log) and checks them afterwards.

Revision ID: 0018
Revises: 0015 (rechained at merge)
Create Date: 2026-11-26 14:40:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"  # after asks (0017), after the ask cache (0016)
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CLAIMABLE = "finalized_at IS NULL AND open_slots > 0"


def _partial(name: str, columns: list[str], where: str, unique: bool = False) -> None:
    op.create_index(
        name,
        "tasks",
        columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    """Upgrade schema."""
    # The copy of ``tasks`` on SQLite would lose the partial index's WHERE: drop it
    # first and make it again after.
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("purpose", sa.String(length=16), server_default="epoch", nullable=False)
        )
        batch_op.add_column(sa.Column("plan_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("part", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("requested_by", sa.Integer(), nullable=True))
        batch_op.drop_constraint("uq_tasks_model_id_benchmark_id_epoch_id", type_="unique")
    _partial("ix_tasks_claimable", ["priority", "id"], _CLAIMABLE)
    _partial(
        "uq_tasks_epoch_pair",
        ["model_id", "benchmark_id", "epoch_id"],
        "purpose = 'epoch'",
        unique=True,
    )
    _partial(
        "uq_tasks_deepen_part",
        ["plan_id", "model_id", "benchmark_id", "part"],
        "purpose = 'deepen'",
        unique=True,
    )
    _partial(
        "ix_tasks_deepen_open", ["requested_by"], "purpose = 'deepen' AND finalized_at IS NULL"
    )
    op.create_index("ix_tasks_model_benchmark", "tasks", ["model_id", "benchmark_id"])


def downgrade() -> None:
    """Downgrade schema (refused while deepen tasks exist: they would lose their
    identity, and several of one (model, benchmark, epoch) break the old constraint)."""
    deepen = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM tasks WHERE purpose != 'epoch'"))
        .scalar()
    )
    if deepen:
        raise RuntimeError(
            f"{deepen} deepen task(s) exist: a downgrade below 0018 would merge them "
            "into the epochs' tasks; it is refused"
        )
    for name in (
        "ix_tasks_model_benchmark",
        "ix_tasks_deepen_open",
        "uq_tasks_deepen_part",
        "uq_tasks_epoch_pair",
        "ix_tasks_claimable",
    ):
        op.drop_index(name, table_name="tasks")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_unique_constraint(
            "uq_tasks_model_id_benchmark_id_epoch_id", ["model_id", "benchmark_id", "epoch_id"]
        )
        for column in ("requested_by", "part", "plan_id", "purpose"):
            batch_op.drop_column(column)
    _partial("ix_tasks_claimable", ["priority", "id"], _CLAIMABLE)
