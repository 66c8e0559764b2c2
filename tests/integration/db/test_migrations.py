"""Alembic migrations on SQLite and PostgreSQL: round trip, drift against the ORM, idempotence.

Every test gets an empty database of its own (a SQLite file or a PostgreSQL schema, see
``conftest.py``) and runs the migrations the way the server does, through
``quorumbench.db.migrate``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, String, Table, func, inspect, select, text
from typer.testing import CliRunner

from quorumbench.cli.app import app
from quorumbench.db.engine import Database, connect
from quorumbench.db.migrate import alembic_config, downgrade, head_revision, upgrade
from quorumbench.db.models import NAMING, Account, Base

APP_TABLES = frozenset(Base.metadata.tables)
VERSION_TABLE = "alembic_version"
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def head(db: Database) -> str:
    revision = ScriptDirectory.from_config(alembic_config(db.url)).get_current_head()
    assert revision is not None
    return revision


def current_revision(db: Database) -> str | None:
    with db.read_engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def table_names(db: Database) -> set[str]:
    with db.read_engine.connect() as conn:
        return set(inspect(conn).get_table_names())


def leftover_objects(db: Database) -> list[str]:
    """Every table, index, sequence or view in the schema other than Alembic's own."""
    with db.read_engine.connect() as conn:
        if db.dialect == "sqlite":
            rows = conn.execute(
                text("SELECT type || ' ' || name FROM sqlite_master WHERE tbl_name != :t"),
                {"t": VERSION_TABLE},
            )
        else:
            rows = conn.execute(
                text(
                    "SELECT c.relkind::text || ' ' || c.relname FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relname NOT IN (:t, :pk)"
                ),
                {"t": VERSION_TABLE, "pk": f"{VERSION_TABLE}_pkc"},
            )
        return sorted(rows.scalars())


def _plain(value: Any) -> Any:
    """Reflected data with SQL expressions (partial index WHERE clauses) turned into text."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def schema_snapshot(db: Database) -> dict[str, Any]:
    """Tables with their columns, keys, indexes and unique constraints, as plain data."""
    with db.read_engine.connect() as conn:
        inspector = inspect(conn)
        return {
            table: {
                "columns": _plain(inspector.get_columns(table)),
                "pk": _plain(inspector.get_pk_constraint(table)),
                "fks": sorted(map(repr, _plain(inspector.get_foreign_keys(table)))),
                "indexes": sorted(map(repr, _plain(inspector.get_indexes(table)))),
                "uniques": sorted(map(repr, _plain(inspector.get_unique_constraints(table)))),
            }
            for table in sorted(inspector.get_table_names())
        }


def version_rows(db: Database) -> list[str]:
    with db.read_engine.connect() as conn:
        return list(conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def add_account(db: Database, name: str) -> int:
    with db.write() as session:
        account = Account(name=name, is_admin=True, created_at=CREATED)
        session.add(account)
        session.flush()
        return account.id


def accounts(db: Database) -> list[tuple[str, bool, datetime]]:
    with db.read() as session:
        return [
            (a.name, a.is_admin, a.created_at)
            for a in session.scalars(select(Account).order_by(Account.id))
        ]


def schema_diffs(db: Database, metadata: MetaData) -> list[Any]:
    """What autogenerate would emit to take the database to ``metadata`` (as env.py compares)."""
    with db.read_engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


def test_upgrade_downgrade_to_base_and_upgrade_again(db: Database) -> None:
    assert table_names(db) == set()

    upgrade(db)
    assert table_names(db) == APP_TABLES | {VERSION_TABLE}
    assert current_revision(db) == head(db)
    add_account(db, "before-downgrade")

    downgrade(db, "base")
    assert table_names(db) == {VERSION_TABLE}, "application tables left after downgrade"
    assert leftover_objects(db) == []
    assert current_revision(db) is None

    upgrade(db)
    assert table_names(db) == APP_TABLES | {VERSION_TABLE}
    assert current_revision(db) == head(db)
    add_account(db, "after-upgrade")
    assert accounts(db) == [("after-upgrade", True, CREATED)]


def test_migrated_schema_matches_orm_metadata(db: Database) -> None:
    upgrade(db)
    assert schema_diffs(db, Base.metadata) == []

    # The check is not vacuous: a model change the migrations lack shows up.
    changed = MetaData(naming_convention=NAMING)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["accounts"].append_column(Column("nickname", String(32), nullable=True))
    Table("drift_probe", changed, Column("id", Integer, primary_key=True))
    diffs = schema_diffs(db, changed)
    assert sorted((d[0], d[2] if d[0] == "add_column" else d[1].name) for d in diffs) == [
        ("add_column", "accounts"),
        ("add_table", "drift_probe"),
    ]


def test_upgrade_twice_is_a_no_op(db: Database) -> None:
    upgrade(db)
    add_account(db, "kept")
    before = schema_snapshot(db)

    upgrade(db)

    assert schema_snapshot(db) == before
    assert version_rows(db) == [head(db)]
    assert accounts(db) == [("kept", True, CREATED)]


def test_cli_db_upgrade(empty_url: str) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["db", "upgrade", "--database-url", empty_url])
    assert refused.exit_code == 1  # an empty database is made a QuorumBench one on request
    assert "no QuorumBench" in refused.output and "--create" in refused.output
    made = runner.invoke(app, ["db", "upgrade", "--database-url", empty_url, "--create"])
    assert made.exit_code == 0, made.output
    assert f"schema none -> {head_revision()}" in made.output
    for _ in range(2):  # later runs find the schema current and change nothing
        result = runner.invoke(app, ["db", "upgrade", "--database-url", empty_url])
        assert result.exit_code == 0, result.output
        assert f"is at schema {head_revision()} (up to date)" in result.output

    db = connect(empty_url)
    try:
        assert table_names(db) == APP_TABLES | {VERSION_TABLE}
        assert version_rows(db) == [head(db)]
        add_account(db, "via-cli")
        with db.read() as session:
            assert session.scalar(select(func.count()).select_from(Account)) == 1
    finally:
        db.dispose()


@pytest.mark.parametrize("url", ["mysql://nobody@localhost/qb", "not a url"])
def test_cli_db_upgrade_rejects_unsupported_url(url: str) -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 1
    assert "error:" in result.output
    assert "Traceback" not in result.output
