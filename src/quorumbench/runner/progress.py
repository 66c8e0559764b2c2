"""How a running task shows its progress: a bar on a terminal, plain lines elsewhere.

On a terminal the runner draws a rich progress bar that disappears when the task is
done. Written to a log file, a pipe or the systemd journal a bar is noise (or
nothing), so there :class:`ProgressLines` logs a line now and then instead:
``task 12: 40/100 samples, 31 s``, every tenth of the task or every 30 seconds,
whichever comes first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

log = logging.getLogger("quorumbench.runner")

Advance = Callable[[int], None]


class ProgressLines:
    """Logs ``task N: k/n samples, t s`` every ``step`` of ``n`` or ``every_s`` seconds
    (``unit``: what is counted, ``runs`` for an edge task)."""

    def __init__(
        self,
        task_id: int,
        total: int,
        *,
        step: float = 0.1,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str], None] = log.info,
        unit: str = "samples",
    ) -> None:
        self.task_id = task_id
        self.unit = unit
        self.total = max(total, 0)
        self.every_s = every_s
        self._step = max(1, round(self.total * step))
        self._clock = clock
        self._emit = emit
        self._start = clock()
        self._done = 0
        self._last_count = 0
        self._last_time = self._start

    def advance(self, k: int) -> None:
        self._done += k
        now = self._clock()
        finished = self.total > 0 and self._done >= self.total
        if (
            finished
            or self._done - self._last_count >= self._step
            or now - self._last_time >= self.every_s
        ):
            self._last_count, self._last_time = self._done, now
            self._emit(
                f"task {self.task_id}: {self._done}/{self.total} {self.unit}, "
                f"{now - self._start:.0f} s"
            )


@contextmanager
def task_progress(
    console: Console | None, task_id: int, label: str, total: int, unit: str = "samples"
) -> Iterator[Advance]:
    """A function to call with each batch's count: a transient bar on a terminal,
    :class:`ProgressLines` on anything else, nothing without a console."""
    if console is None:
        yield lambda k: None
        return
    if not console.is_terminal:
        yield ProgressLines(task_id, total, unit=unit).advance
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        bar_task = bar.add_task(escape(label), total=total)  # a model ref may hold "[…]"
        yield lambda k: bar.advance(bar_task, k)
