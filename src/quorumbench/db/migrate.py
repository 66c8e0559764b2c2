"""Schema migrations (Alembic), run from code: ``quorumbench db upgrade`` and startup."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

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


def current_revision(db: Database) -> str | None:
    """The schema revision the database is at (None: no QuorumBench schema yet)."""
    with db.read_engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    """The newest schema revision this version of QuorumBench knows."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


def known_revision(revision: str) -> bool:
    """Whether this version of QuorumBench has a migration of that revision."""
    return any(script.revision == revision for script in _scripts().walk_revisions())


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))
