"""Everything a use case needs, wired once by create_app / the CLI."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from quorumbench.db.engine import Database
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.queue.base import TaskQueue
from quorumbench.settings import ServerSettings

IDENTITY_TTL_S = 5.0
"""How long a token's principal and a runner's id are remembered between requests.

Revoking a token or suspending a runner through this process forgets them at once;
another server replica notices within this many seconds.
"""


def utc_now() -> datetime:
    return datetime.now(UTC)


class TtlMemo:
    """Thread-safe TTL memo: who is calling (saves a read or two per request), the
    ranked leaderboard the web pages filter (services/site.py)."""

    def __init__(self, ttl_s: float = IDENTITY_TTL_S, maxsize: int = 100_000) -> None:
        self._entries: TTLCache[Hashable, Any] = TTLCache(maxsize=maxsize, ttl=ttl_s)
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


@dataclass
class ServerContext:
    """Settings, database, queue and clock (tests pass a fake clock)."""

    settings: ServerSettings
    db: Database
    queue: TaskQueue
    clock: Callable[[], datetime] = utc_now
    datasets_dir: Path | None = None
    loaded_benchmarks: dict[str, Benchmark] = field(default_factory=dict)
    inspector: Callable[[str], Any] | None = None
    """Model inspection override (tests, offline demos); default: model_metadata."""
    identities: TtlMemo = field(default_factory=TtlMemo)
    log_signer: Any = None
    """The public log's signing key, loaded on first use (services/publiclog.py)."""
    rate_limiter: Any = None
    """Per-account write limits, built on first use (services/ratelimit.py)."""
    auth_signer: Any = None
    """The key that signs access JWTs, loaded on first use (services/sessions.py)."""
    sample_subjects: dict[tuple[str, int, str], dict[str, str | None]] = field(default_factory=dict)
    """Per benchmark (name, version, data SHA-256): each sample id's subject label, or
    None for an id its data does not have; filled as pages ask (services/site.py)."""
    boards: TtlMemo | None = None
    """What the web pages keep ``web_cache_s`` seconds: the ranked leaderboards and the
    runner counts (services/site.py)."""
    created: bool = False
    """The database had no QuorumBench schema when this context was built (a new one)."""
    fruitless_plan: tuple[int, ...] | None = None
    """What the epoch had when the scheduler last planned and nothing fitted the budget
    (services/scheduler.py): no replanning on every tick until that changes."""

    def now(self) -> datetime:
        return self.clock()

    def close(self) -> None:
        self.queue.close()
        self.db.dispose()
