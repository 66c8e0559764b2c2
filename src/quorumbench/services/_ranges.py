"""The first bytes of a file, read a piece at a time as a header parser needs them.

Registration reads the headers of weight files (GGUF, safetensors) from a local file
or, for a Hub model, through HTTP range requests: never the weights behind them, and
nothing is written to disk. :class:`HeaderBuffer` holds the bytes from the start of
the file and, when a parser asks past its end, fetches more, at least doubling what it
holds: a header of n bytes costs O(log n) reads and at most about 2n bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from quorumbench.errors import RegistrationError

FIRST_READ = 64 * 1024
"""What the first read of a header asks for."""


class ByteSource(Protocol):
    """A file that can be read at an offset (a local file, a Hub file over HTTP)."""

    @property
    def name(self) -> str:
        """How messages name the file."""
        ...

    @property
    def size(self) -> int | None:
        """The file's size, when known."""
        ...

    def read(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; fewer only where the file ends."""
        ...


@dataclass(frozen=True)
class FileSource:
    """A local file as a :class:`ByteSource`."""

    path: Path

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def size(self) -> int | None:
        return self.path.stat().st_size

    def read(self, start: int, length: int) -> bytes:
        try:
            with self.path.open("rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except OSError as exc:
            raise RegistrationError(f"cannot read {self.path}: {exc}") from exc


class HeaderBuffer:
    """The bytes at the start of ``source``, fetched as needed (see the module docstring).

    ``limit`` bounds the header: asking for more is a :class:`RegistrationError`, so a
    malformed or hostile file never makes the server read far into it.
    """

    def __init__(self, source: ByteSource, *, limit: int, first: int = FIRST_READ) -> None:
        self.source, self.limit, self.first = source, limit, first
        self.data = bytearray()
        self.reads = 0
        """Reads made (HTTP requests, for a Hub file)."""
        self._size = source.size

    @property
    def fetched(self) -> int:
        """Bytes read from the source so far."""
        return len(self.data)

    def ensure(self, end: int) -> None:
        """Hold at least the bytes ``[0, end)``, or raise saying why they are not there."""
        have = len(self.data)
        if end <= have:
            return
        if end > self.limit:
            raise RegistrationError(
                f"{self.source.name}: its header would be larger than {self.limit:,} bytes"
            )
        want = min(max(end, 2 * have, self.first), self.limit)
        if self._size is not None:
            want = min(want, self._size)
        if want > have:
            chunk = self.source.read(have, want - have)
            self.reads += 1
            self.data += chunk[: want - have]
        if len(self.data) < end:
            raise RegistrationError(
                f"{self.source.name} ends after {len(self.data):,} bytes, inside its header "
                "(a truncated or malformed file)"
            )

    def slice(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)``."""
        self.ensure(end)
        return bytes(self.data[start:end])
