"""Build a ServerContext from settings: for the server, and for admin commands.

The server (:func:`build_context`) connects, migrates, registers its configured
benchmarks, checks the public log's key and reads (or makes) the key that signs
access JWTs, fails the asks a stopped server left running (their keys went with it:
``services/live.py``), and builds the rate limiter: its context holds all three from the start.
Admin commands (:func:`admin_context`) only connect: they never change what the
server schedules, never make a key (their context holds none), and never make a
database unless asked (``create``). Both say in one line what is wrong with a
database they cannot use.
"""

from __future__ import annotations

from pathlib import Path

from quorumbench import __version__
from quorumbench.db.engine import Database, check_connection, connect, describe_url, sqlite_path
from quorumbench.db.migrate import current_revision, head_revision, known_revision, upgrade
from quorumbench.errors import ConfigError
from quorumbench.queue.base import TaskQueue
from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services.benchmarks import ensure_benchmarks
from quorumbench.services.context import ServerContext, WriteLimits, utc_now
from quorumbench.services.live import fail_abandoned
from quorumbench.services.publiclog import ensure_log, read_signer
from quorumbench.services.ratelimit import build_limiter
from quorumbench.services.sessions import load_auth_key
from quorumbench.settings import ServerSettings


def build_queue(settings: ServerSettings, db: Database) -> TaskQueue:
    sql = SqlTaskQueue(db, settings.lease_seconds)
    if settings.queue.backend == "sql":
        return sql
    from quorumbench.queue.redis_streams import RedisStreamTaskQueue

    assert settings.queue.redis_url is not None
    return RedisStreamTaskQueue(sql, settings.queue.redis_url, settings.queue.stream)


POINT_AT_SERVER = (
    "(--database-url or QB_DATABASE_URL name the server's database; without them, "
    "--data-dir or QB_DATA_DIR the directory of its SQLite file)"
)


CREATE_HINT = "; pass --create to make a new one there"


def open_database(settings: ServerSettings, *, create: bool, hint: str = CREATE_HINT) -> Database:
    """Connect and check the connection; a SQLite file that does not exist is made
    only when ``create`` (else refused, the message ending with ``hint``)."""
    url = settings.sqlalchemy_url
    path = sqlite_path(url)
    if path is not None and not path.exists() and not create:
        raise ConfigError(f"there is no QuorumBench database at {path} {POINT_AT_SERVER}{hint}")
    db = connect(url)
    try:
        check_connection(db)
    except BaseException:
        db.dispose()
        raise
    return db


def check_schema(
    db: Database, *, create: bool, migrate: bool, hint: str = CREATE_HINT
) -> str | None:
    """Refuse a schema this version cannot use; migrate when allowed. The revision the
    database was at before (None: it had no QuorumBench schema)."""
    current = current_revision(db)
    where = describe_url(db.url)
    if current is not None and not known_revision(current):
        raise ConfigError(
            f"the database {where} has schema revision {current}, which quorumbench "
            f"{__version__} does not know: a newer QuorumBench wrote it; upgrade quorumbench"
        )
    if current is None and not create:
        raise ConfigError(
            f"the database {where} holds no QuorumBench schema {POINT_AT_SERVER}{hint}"
        )
    head = head_revision()
    if current != head:
        if not migrate and current is not None:
            raise ConfigError(
                f"the database {where} is at schema revision {current}, this quorumbench "
                f"needs {head}: run `quorumbench db upgrade` with the same settings first"
            )
        upgrade(db)
    return current


def write_limits(settings: ServerSettings) -> WriteLimits | None:
    """The per-account write limits the settings ask for (None: no limit)."""
    if not settings.write_rate_limit:
        return None
    return build_limiter(settings.write_rate_limit, settings.rate_limit_storage)


def submission_limits(settings: ServerSettings) -> WriteLimits | None:
    """The per-account limits on validations and registrations (None: no limit)."""
    if not settings.submission_rate_limit:
        return None
    return build_limiter(
        settings.submission_rate_limit,
        settings.rate_limit_storage,
        namespace="submissions",
        what="validations and registrations",
    )


def build_context(
    settings: ServerSettings, *, datasets_dir: Path | None = None, migrate: bool = True
) -> ServerContext:
    """The server's context: connect, migrate to the latest schema, register the
    configured benchmarks, check (or on a new log, make) the log's signing key, read
    (or make) the key that signs access JWTs, build the write limits.

    Without ``migrate`` (a database another context has made current) the schema and
    the log are left as they are: the log's key is only read."""
    limits = write_limits(settings)
    submissions = submission_limits(settings)
    db = open_database(settings, create=True)
    try:
        created = migrate and check_schema(db, create=True, migrate=True) is None
        ctx = ServerContext(
            settings,
            db,
            build_queue(settings, db),
            utc_now,
            datasets_dir,
            rate_limiter=limits,
            submission_limiter=submissions,
            created=created,
        )
    except BaseException:
        db.dispose()
        raise
    try:
        ensure_benchmarks(ctx, settings.benchmarks)
        ctx.log_signer = ensure_log(ctx) if migrate else read_signer(settings)
        ctx.auth_signer = load_auth_key(settings)
        fail_abandoned(ctx)  # asks another run of the server held: their keys are gone
    except BaseException:
        ctx.close()
        raise
    return ctx


def check_serving(ctx: ServerContext) -> ServerContext:
    """``ctx`` if it can serve requests (built by :func:`build_context`); ConfigError
    for an admin or reader context, which holds no log or auth key."""
    if ctx.log_signer is None or ctx.auth_signer is None:
        raise ConfigError(
            "this context cannot serve: it holds no log or auth signing key (an admin or "
            "reader context?); the server's context is built by build_context"
        )
    return ctx


def admin_context(
    settings: ServerSettings, *, create: bool = False, hint: str = CREATE_HINT
) -> ServerContext:
    """A context for admin commands on the server machine (accounts, tokens, keys).

    It reads the same settings as ``serve`` but changes nothing the server owns: no
    benchmark is registered or retired, no key is read or made (it holds no log or
    auth key and no rate limiter), no queue is contacted, and the schema must already
    be current (``quorumbench db upgrade``), or absent with ``create`` (then it is
    made).
    """
    db = open_database(settings, create=create, hint=hint)
    try:
        check_schema(db, create=create, migrate=False, hint=hint)
    except BaseException:
        db.dispose()
        raise
    return ServerContext(settings, db, SqlTaskQueue(db, settings.lease_seconds), utc_now)


def reader_context(settings: ServerSettings, datasets_dir: Path | None = None) -> ServerContext:
    """A context for reading an existing database (``export-site``): the admin
    commands' context, which changes nothing the server owns."""
    ctx = admin_context(settings, hint="")
    ctx.datasets_dir = datasets_dir
    return ctx
