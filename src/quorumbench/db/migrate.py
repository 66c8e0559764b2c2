"""Schema migrations (Alembic), run from code: ``quorumbench db upgrade`` and startup."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
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
    _run(db, lambda config: command.upgrade(config, revision))


def downgrade(db: Database, revision: str) -> None:
    _run(db, lambda config: command.downgrade(config, revision))


def _run(db: Database, step: Callable[[Config], None]) -> None:
    """Run ``step`` on one write connection, committed.

    On SQLite, foreign keys are off meanwhile (checked once it has committed): a
    migration that changes a constraint copies the table, and dropping the old copy
    of a table others reference (``tasks``) would fail with them on. The pragma only
    takes effect outside a transaction, so it is sent before the migration begins one.
    """
    with db.write_engine.connect() as connection:
        sqlite = db.dialect == "sqlite"
        if sqlite:
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
        try:
            config = alembic_config(db.url)
            config.attributes["connection"] = connection
            step(config)
            connection.commit()
        finally:
            if sqlite:
                raw = connection.connection.driver_connection
                raw.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
        if sqlite:
            broken = raw.execute("PRAGMA foreign_key_check").fetchall()  # type: ignore[union-attr]
            if broken:
                raise RuntimeError(
                    f"the migration left rows with broken foreign keys: {broken[:5]}"
                )


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


@cache
def _scripts() -> ScriptDirectory:
    """The migration scripts, read once per process: reading them runs every revision
    file (tens of milliseconds), and each context that is built asks for the head."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))
