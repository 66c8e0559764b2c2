"""Progress off a terminal: a plain line every tenth of the task or every 30 s."""

from __future__ import annotations

import io

from rich.console import Console

from quorumbench.runner.progress import ProgressLines, task_progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_tenth_and_at_the_end():
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines(12, 100, clock=clock, emit=lines.append)
    for _ in range(25):
        clock.now += 1.24
        progress.advance(4)
    assert lines[0] == "task 12: 12/100 samples, 4 s"
    assert lines[-1] == "task 12: 100/100 samples, 31 s"
    assert len(lines) == 9  # 12, 24, 36, 48, 60, 72, 84, 96, 100


def test_a_line_every_30_seconds_on_a_slow_task():
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines(3, 1000, clock=clock, emit=lines.append)
    for _ in range(4):
        clock.now += 16
        progress.advance(1)
    assert lines == ["task 3: 2/1000 samples, 32 s", "task 3: 4/1000 samples, 64 s"]


def test_a_terminal_gets_a_bar_and_a_file_gets_lines(caplog):
    file = io.StringIO()
    console = Console(file=file, force_terminal=False)
    with (
        caplog.at_level("INFO", "quorumbench.runner"),
        task_progress(console, 5, "x", 2) as advance,
    ):
        advance(2)
    assert "task 5: 2/2 samples" in caplog.text
    terminal = io.StringIO()
    console = Console(file=terminal, force_terminal=True, width=80)  # a terminal
    with task_progress(console, 5, "task 5 arith × hf:/models/[bold]m", 2) as advance:
        advance(2)
    assert "[bold]m" in terminal.getvalue()  # escaped, not markup
