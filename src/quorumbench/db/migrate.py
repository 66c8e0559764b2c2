"""Schema migrations (Alembic), run from code: ``quorumbench db upgrade`` and startup."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from quorumbench.db.engine import Database

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (idempotent)."""
    with db.write_engine.connect() as connection:
        config = alembic_config(db.url)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        connection.commit()


def downgrade(db: Database, revision: str) -> None:
    with db.write_engine.connect() as connection:
        config = alembic_config(db.url)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        connection.commit()
