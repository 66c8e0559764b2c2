"""model engine: the engine family that evaluates a model, and made a result (1.3)

``models.engine`` (String(16), nullable) is ``llamacpp``, ``transformers`` or
``endpoint`` (``evaluation.refs.engine_for``), or null for a backend plugin's scheme;
every task of the model names it (``TaskModel.engine``) and runners without it are not
offered the task. Models registered before this revision keep the engine their results
came from: transformers for ``hf:``, ``gguf:`` and ``bundled:`` refs (GGUF files were
de-quantized), the endpoint for ``openai:`` refs, null otherwise. ``results.engine``
(String(16), nullable) is the engine a result names (``ResultPayload.engine``, signed;
the public log carries it when set); null for results of runners before 1.3. Added in
place.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 21:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column("models", sa.Column("engine", sa.String(length=16), nullable=True))
    op.add_column("results", sa.Column("engine", sa.String(length=16), nullable=True))
    op.execute(
        "UPDATE models SET engine = CASE"
        " WHEN ref LIKE 'openai:%' THEN 'endpoint'"
        " WHEN ref LIKE 'hf:%' OR ref LIKE 'gguf:%' OR ref LIKE 'bundled:%' THEN 'transformers'"
        " END"
    )


def downgrade() -> None:
    """Downgrade schema: refused while a model is evaluated by llama.cpp (the older code
    would de-quantize it on transformers, and its tasks would mix both engines'
    results)."""
    bind = op.get_bind()
    on_llamacpp = bind.execute(sa.text("SELECT count(*) FROM models WHERE engine = 'llamacpp'"))
    if on_llamacpp.scalar_one():
        raise RuntimeError(
            "models evaluated by llama.cpp exist: below 0026 their tasks would take "
            "transformers results beside llama.cpp ones; it is refused"
        )
    for table in ("results", "models"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("engine")
