"""Everything a use case needs, wired once by create_app / the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quorumbench.db.engine import Database
from quorumbench.evaluation.benchmark import Benchmark
from quorumbench.queue.base import TaskQueue
from quorumbench.settings import ServerSettings


def utc_now() -> datetime:
    return datetime.now(UTC)


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

    def now(self) -> datetime:
        return self.clock()

    def close(self) -> None:
        self.queue.close()
        self.db.dispose()
