"""Everything a use case needs, wired once by create_app / the CLI."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from cachetools import TTLCache

from quorumbench.db.engine import Database
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.queue.base import TaskQueue
from quorumbench.services.keys import SigningKey
from quorumbench.settings import ServerSettings

if TYPE_CHECKING:  # only for the inspector's type: the module pulls in the Hub client
    from quorumbench.services.model_metadata import ModelMetadata

V = TypeVar("V")

IDENTITY_TTL_S = 5.0
"""How long who-is-calling facts are remembered between requests (a token's
principal, a session's state, a runner's id, a runner key).

Revoking a token or a session, suspending a runner, or registering or revoking a
runner key through this process forgets them at once (:func:`forget_identities`);
another server replica notices within this many seconds.
"""


def utc_now() -> datetime:
    return datetime.now(UTC)


class TtlMemo:
    """Thread-safe TTL memo: under the identity cache, and the ranked leaderboards the
    web pages filter (``services/board.py``)."""

    def __init__(
        self,
        ttl_s: float = IDENTITY_TTL_S,
        maxsize: int = 100_000,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: TTLCache[Hashable, Any] = TTLCache(maxsize=maxsize, ttl=ttl_s, timer=timer)
        self._lock = threading.Lock()
        self._making = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = value

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value under ``key``, else ``make()``'s, stored. One maker at a time: a
        request that misses while another is making waits for its value instead of
        making it again (hits never wait)."""
        found = self.get(key)
        if found is not None:
            return found
        with self._making:
            found = self.get(key)
            if found is None:
                found = make()
                self.put(key, found)
            return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


@dataclass(frozen=True)
class IdentityKey(Generic[V]):
    """A key of the identity cache. Each kind of entry is a frozen dataclass deriving
    from ``IdentityKey[<its value's type>]``, declared next to the code that fills it:
    ``accounts.TokenDigest`` (an API token's principal), ``sessions.SessionId`` (an
    access JWT's session), ``runners.RunnerName`` (a runner's id),
    ``runner_keys.RunnerKeyId`` (an unrevoked runner key). Keys of different kinds
    never equal each other, whatever their fields."""


class IdentityCache:
    """Who is calling, remembered :data:`IDENTITY_TTL_S` seconds (saves a read or two
    per request). Only :func:`forget_identities` empties it."""

    def __init__(
        self, ttl_s: float = IDENTITY_TTL_S, timer: Callable[[], float] = time.monotonic
    ) -> None:
        self._memo = TtlMemo(ttl_s, timer=timer)

    def get(self, key: IdentityKey[V]) -> V | None:
        return cast("V | None", self._memo.get(key))

    def put(self, key: IdentityKey[V], value: V) -> None:
        self._memo.put(key, value)

    def _forget_all(self) -> None:
        self._memo.clear()


class WriteLimits(Protocol):
    """Per-account write limits (``services/ratelimit.py``'s ``WriteLimiter``)."""

    def hit(self, account_id: int) -> None:
        """Count one write; RateLimitedError when the account is over a limit."""
        ...


class LiveWork(Protocol):
    """The pool that evaluates people's endpoints (``services/live.py``'s ``LivePool``)."""

    def shutdown(self) -> None:
        """Stop; unfinished asks fail (their keys go with this process)."""
        ...


@dataclass
class ServerContext:
    """Settings, database, queue and clock (tests pass a fake clock), the server's
    keys and limits, and per-process caches.

    ``services/wiring.py`` builds every context: the server's (``build_context``,
    which ``create_app`` calls) holds the log and auth keys and the rate limiter from
    its start; admin and reader contexts hold none of them (None), and the services
    that need one say so when asked (``publiclog.signer_for``,
    ``sessions.auth_signer_for``, ``ratelimit.count_write``).
    """

    settings: ServerSettings
    db: Database
    queue: TaskQueue
    clock: Callable[[], datetime] = utc_now
    datasets_dir: Path | None = None
    loaded_benchmarks: dict[str, Benchmark] = field(default_factory=dict)
    inspector: Callable[[str], ModelMetadata] | None = None
    """Model inspection override (tests, offline demos); default: model_metadata."""
    identities: IdentityCache = field(default_factory=IdentityCache)
    log_signer: SigningKey | None = None
    """The public log's signing key, checked against the log at the server's start
    (``publiclog.ensure_log``); None in admin and reader contexts."""
    auth_signer: SigningKey | None = None
    """The key that signs access JWTs, read (or made) at the server's start
    (``sessions.load_auth_key``); None in admin and reader contexts."""
    rate_limiter: WriteLimits | None = None
    """Per-account write limits (``ratelimit.build_limiter``); None when
    ``QB_WRITE_RATE_LIMIT`` is empty, and in admin and reader contexts."""
    submission_limiter: WriteLimits | None = None
    """Per-account limits on validations and registrations (``ratelimit.count_submission``);
    None when ``QB_SUBMISSION_RATE_LIMIT`` is empty, and in admin and reader contexts."""
    sample_subjects: dict[tuple[str, int, str], dict[str, str | None]] = field(default_factory=dict)
    """Per benchmark (name, version, data SHA-256): each sample id's subject label, or
    None for an id its data does not have; filled as pages ask (services/subjects.py)."""
    boards: TtlMemo | None = None
    """What the web pages keep ``web_cache_s`` seconds: the ranked leaderboards and the
    runner counts (made by services/board.py on first use, with the TTL set then)."""
    created: bool = False
    """The database had no QuorumBench schema when this context was built (a new one)."""
    label_sets: dict[tuple[int, tuple[str, ...]], int] = field(default_factory=dict)
    """The ask cache's label set ids by (benchmark id, labels), as the startup backfill
    committed them (services/label_cache.py): the finalizing hot path reads ids here."""
    fruitless_plan: tuple[int, ...] | None = None
    """What the epoch had when the scheduler last planned and nothing fitted the budget
    (services/scheduler.py): no replanning on every tick until that changes."""
    live: LiveWork | None = None
    """The live evaluation workers of asks with endpoints (services/live.py), made on the
    first such ask; the server's lifespan and :meth:`close` stop them."""
    scheduling_at: datetime | None = None
    """When set, the scheduler schedules the epoch holding this time instead of the
    current one (``quorumbench demo`` holds its epoch while its runners work, so an hour
    that turns meanwhile adds no tasks to wait behind); leases, canaries and the rest
    still run on :meth:`now`."""

    def now(self) -> datetime:
        return self.clock()

    def scheduling_time(self) -> datetime:
        """The time whose epoch the scheduler fills (:attr:`scheduling_at`, else now)."""
        return self.scheduling_at or self.clock()

    def close(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.shutdown()
        self.queue.close()
        self.db.dispose()


def forget_identities(ctx: ServerContext) -> None:
    """Forget every remembered identity in this process, at once.

    Every change to who may do what calls it: revoking an API token or a login
    session, suspending a runner, registering a runner key (which revokes its older
    ones) or revoking one. Other replicas notice within :data:`IDENTITY_TTL_S`.
    """
    ctx.identities._forget_all()
