"""The house rules STYLE.md sets for the package's shape."""

from __future__ import annotations

from pathlib import Path

import quorumbench

SRC = Path(quorumbench.__file__).parent
MAX_LINES = 600


def test_no_module_is_over_600_lines():
    """STYLE.md, rule 4: a module past 600 lines is split by concern."""
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100  # the package itself, not an empty directory
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not too_long, too_long
