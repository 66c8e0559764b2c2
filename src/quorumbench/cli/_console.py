"""The command line's consoles: rich on a terminal, whole lines in a file or a pipe.

Two rules for everything the commands print through rich:

* Text that comes from the user or from data (paths, refs, model names, error
  messages, sample outputs) is never read as markup: rich takes ``[bold]`` or
  ``[a-z0-9]`` in it for a tag and drops it. Interpolate it with :func:`escape`
  (``f"[green]ok[/] {escape(name)}"``), or print a :class:`~rich.text.Text`; table
  cells are markup too (:func:`cell`). Emoji codes (``:smile:``) are off.
* Output that goes to a file or a pipe is not wrapped: rich would cut a URL, a key id
  or a hash at 80 columns, which breaks every script that reads it. The consoles made
  here soft-wrap (each printed line stays one line) and lay tables out
  :data:`PIPE_WIDTH` wide when they are not writing to a terminal, unless ``COLUMNS``
  sets a width; lines lose the trailing spaces rich pads them with (tables, log
  lines), and a rule is 80 wide. On a terminal they behave as rich does.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.align import AlignMethod
from rich.console import Console, ConsoleDimensions
from rich.markup import escape as _escape
from rich.rule import Rule
from rich.segment import Segment
from rich.style import Style
from rich.text import Text, TextType

PIPE_WIDTH = 1000
"""The width tables are laid out to in a file or pipe (each is as wide as its content)."""
RULE_WIDTH = 80
"""A rule (a full-width line) in a file or pipe."""


class CliConsole(Console):
    """A :class:`~rich.console.Console` that does not wrap lines outside a terminal.

    Whether it writes to a terminal is asked at each print, not when it is made: the
    shared consoles are made at import, before a test or a caller swaps the stream.
    """

    _soft_wrap: bool

    def _piped(self) -> bool:
        isatty = getattr(self.file, "isatty", None)
        try:
            return not (isatty is not None and isatty())
        except ValueError:  # a closed stream
            return True

    def _unbounded(self) -> bool:
        """Writing to a file or pipe, and no width was given (``COLUMNS``)."""
        return self._width is None and "COLUMNS" not in self._environ and self._piped()

    @property
    def soft_wrap(self) -> bool:
        return self._soft_wrap or self._piped()

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:
        self._soft_wrap = value

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return ConsoleDimensions(PIPE_WIDTH, size.height) if self._unbounded() else size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def rule(
        self,
        title: TextType = "",
        *,
        characters: str = "─",
        style: str | Style = "rule.line",
        align: AlignMethod = "center",
    ) -> None:
        rule = Rule(title=title, characters=characters, style=style, align=align)
        self.print(rule, width=RULE_WIDTH if self._unbounded() else None)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        text = super()._render_buffer(buffer)
        if self._piped():
            # Tables and log lines pad their last column to the width: not in a file.
            text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
        return text


def make_console(*, stderr: bool = False) -> Console:
    """A console for the command line's output (stdout) or its errors (``stderr``)."""
    return CliConsole(stderr=stderr, emoji=False)


def escape(value: object) -> str:
    """``value`` as text that rich prints as it is (no markup read in it)."""
    return _escape(str(value))


def cell(value: object) -> Text:
    """A table cell that shows ``value`` as it is."""
    return Text(str(value))


def error_line(message: str, label: str = "error:") -> Text:
    """``error: <message>`` with the label in bold red and the message as it is."""
    return Text.assemble((label, "bold red"), " ", message)
