"""Migration 0018 (deepen tasks) on a database with tasks that leases reference.

On SQLite it copies ``tasks`` (dropping a constraint); ``db/migrate.py`` turns foreign
keys off around it, so the copy keeps every row and every reference still holds.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import MetaData, insert, select, text
from sqlalchemy.exc import IntegrityError

from quorumbench.db.engine import Database
from quorumbench.db.migrate import downgrade, upgrade

from .test_migrations import CREATED

WHEN = CREATED.isoformat()


def _seed(db: Database) -> None:
    """An account, model, benchmark, epoch, task and a lease on it, as 0015 has them."""
    meta = MetaData()
    with db.write_engine.begin() as conn:
        meta.reflect(conn)
        t = meta.tables
        conn.execute(
            insert(t["accounts"]),
            {"id": 1, "name": "a", "is_admin": False, "created_at": CREATED},
        )
        conn.execute(
            insert(t["models"]),
            {
                "id": 1,
                "ref": "hf:o/m@1",
                "name": "m",
                "owner_id": 1,
                "revision": "1",
                "details": {},
                "active": True,
                "created_at": CREATED,
            },
        )
        conn.execute(
            insert(t["benchmarks"]),
            {
                "id": 1,
                "name": "arith",
                "version": 1,
                "prompt_version": 1,
                "kind": "generate",
                "dataset_sha256": "0" * 64,
                "config": {},
                "samples_per_task": 4,
                "weight": 1.0,
                "active": True,
                "created_at": CREATED,
            },
        )
        conn.execute(
            insert(t["epochs"]),
            {
                "id": 7,
                "starts_at": CREATED,
                "ends_at": CREATED,
                "seed": "s",
                "seed_commitment": "c",
            },
        )
        conn.execute(
            insert(t["tasks"]),
            {
                "id": 1,
                "model_id": 1,
                "benchmark_id": 1,
                "epoch_id": 7,
                "n_samples": 4,
                "status": "PENDING",
                "round": 1,
                "quorum": 3,
                "open_slots": 2,
                "attempts": 1,
                "sample_ids": ["a", "b", "c", "d"],
                "priority": 0,
                "created_at": CREATED,
            },
        )
        conn.execute(
            insert(t["runners"]),
            {
                "id": 1,
                "account_id": 1,
                "name": "r",
                "created_at": CREATED,
                "agreements": 0,
                "outliers": 0,
                "suspended": False,
            },
        )
        conn.execute(
            insert(t["leases"]),
            {
                "id": 1,
                "task_id": 1,
                "runner_id": 1,
                "account_id": 1,
                "attempt": 1,
                "round": 1,
                "state": "ACTIVE",
                "leased_at": CREATED,
                "expires_at": CREATED,
            },
        )


def _task_row(**values: object) -> dict[str, object]:
    row = {
        "model_id": 1,
        "benchmark_id": 1,
        "epoch_id": 7,
        "n_samples": 1,
        "status": "PENDING",
        "round": 1,
        "quorum": 3,
        "open_slots": 3,
        "attempts": 0,
        "sample_ids": json.dumps(["e"]),
        "priority": 0,
        "created_at": WHEN,
    }
    row.update(values)
    return row


def _insert(db: Database, row: dict[str, object]) -> None:
    columns = ", ".join(row)
    params = ", ".join(f":{c}" for c in row)
    with db.write_engine.begin() as conn:
        conn.execute(text(f"INSERT INTO tasks ({columns}) VALUES ({params})"), row)


def test_0018_keeps_tasks_and_their_references_and_makes_two_identities(db: Database) -> None:
    upgrade(db, "0015")
    _seed(db)
    upgrade(db)
    with db.read_engine.connect() as conn:
        task = conn.execute(text("SELECT * FROM tasks")).mappings().one()
        assert (task["id"], task["purpose"], task["plan_id"], task["part"]) == (
            1,
            "epoch",
            None,
            None,
        )
        assert conn.execute(text("SELECT task_id FROM leases")).scalar() == 1
        if db.dialect == "sqlite":
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
    # a second epoch task of the same (model, benchmark, epoch) is refused ...
    with pytest.raises(IntegrityError):
        _insert(db, _task_row())
    # ... deepen tasks of that pair and epoch are not, one per (plan, part)
    deepen = {"purpose": "deepen", "plan_id": "p" * 64, "requested_by": 1}
    _insert(db, _task_row(part=0, **deepen))
    _insert(db, _task_row(part=1, **deepen))
    with pytest.raises(IntegrityError):
        _insert(db, _task_row(part=1, **deepen))
    # a foreign key still holds after the migration
    with pytest.raises(IntegrityError):
        _insert(db, _task_row(epoch_id=8, part=2, **deepen))
    # and the way back is refused while deepen tasks exist
    with pytest.raises(RuntimeError, match="deepen task"):
        downgrade(db, "0015")
    with db.write_engine.begin() as conn:
        conn.execute(text("DELETE FROM tasks WHERE purpose = 'deepen'"))
    downgrade(db, "0015")
    with db.read_engine.connect() as conn:
        assert conn.execute(select(text("count(*)")).select_from(text("tasks"))).scalar() == 1
