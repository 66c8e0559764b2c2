"""Databases migrated once, copied per test.

Migrating a new database through every Alembic revision takes seconds; copying a
migrated one takes milliseconds. A test run migrates one SQLite file and one
PostgreSQL database (the *templates*), under a lock so that parallel workers make them
once, and a test's new database starts as a copy: a file copy on SQLite, ``CREATE
DATABASE … TEMPLATE`` on PostgreSQL. Both templates are named after a digest of the
migrations, so a changed migration never meets an old template. The migrations
themselves are still run from empty by ``tests/integration/db/`` (every revision,
upgrade → downgrade → upgrade, on both databases).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from pathlib import Path

from filelock import FileLock

from quorumbench.db.migrate import MIGRATIONS


@functools.cache
def migrations_digest() -> str:
    """A digest of every file of the migrations (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(str(path.relative_to(MIGRATIONS)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def sqlite_template(folder: Path) -> Path:
    """The migrated SQLite file in ``folder`` (made now unless another worker has)."""
    from quorumbench.db.engine import connect
    from quorumbench.db.migrate import upgrade

    path = folder / f"qb-template-{migrations_digest()}.db"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return path
        staging = path.with_name(f"{path.stem}-{os.getpid()}.db")
        db = connect(f"sqlite:///{staging}")
        try:
            upgrade(db)
        finally:
            db.dispose()  # the last connection checkpoints the WAL into the file
        for suffix in ("-wal", "-shm", "-journal"):
            leftover = staging.with_name(staging.name + suffix)
            if leftover.exists() and leftover.stat().st_size:
                raise RuntimeError(f"{leftover} is not empty: the template is incomplete")
            leftover.unlink(missing_ok=True)
        staging.rename(path)
    return path


def copy_sqlite(template: Path, target: Path) -> str:
    """A new SQLite database at ``target``, a copy of ``template``; its URL."""
    if target.exists():
        raise FileExistsError(f"{target} exists: a copy of the template would replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


_SHARED: list[Path] = []
"""Where this run's SQLite template lives (the folder every xdist worker shares): set
once per session by ``tests/conftest.py``."""


def share_in(folder: Path) -> None:
    """Keep the SQLite template in ``folder`` (made there when it is first asked for)."""
    _SHARED[:] = [folder]


def migrated_sqlite(target: Path) -> str:
    """A new SQLite database at ``target``, migrated (a copy of the template); its URL."""
    assert _SHARED, "tests/conftest.py names the shared folder at the session's start"
    return copy_sqlite(sqlite_template(_SHARED[0]), target)
