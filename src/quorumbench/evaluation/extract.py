"""Answer extraction and number normalisation shared by the benchmarks."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?")
_AFTER_HASHES = re.compile(r"####\s*(-?\$?\s?\d[\d,]*(?:\.\d+)?)")
_LEADING_ZEROS = re.compile(r"^(-?)0+(?=\d)")


def normalize_number(text: str) -> str:
    """Canonical form of a number as written in an answer.

    Removes whitespace, ``$`` signs, thousands commas, a leading ``+``, leading
    zeros and a fractional part of zeros: ``"$1,200.00"`` becomes ``"1200"``,
    ``"3.50"`` becomes ``"3.5"`` and ``"-0"`` becomes ``"0"``.
    """
    value = re.sub(r"[\s$,]", "", text).lstrip("+").rstrip(".")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    value = _LEADING_ZEROS.sub(r"\1", value)
    if value in {"-0", "-", ""}:
        return "0" if value == "-0" else value
    return value


def last_number(text: str) -> str | None:
    """The last number in ``text``, normalised, or ``None`` when there is none."""
    matches = _NUMBER.findall(text)
    return normalize_number(matches[-1]) if matches else None


def hashes_number(text: str) -> str | None:
    """The number after the first ``####`` marker, normalised, if any."""
    match = _AFTER_HASHES.search(text)
    return normalize_number(match.group(1)) if match else None


def extract_final_number(text: str) -> str | None:
    """GSM8K-style answer: the number after ``####``, else the last number."""
    return hashes_number(text) or last_number(text)


FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)(```|\Z)", re.DOTALL)
"""A fenced code block of a chat answer: its language, its code, and its closing fence
(empty when the fence is still open at the end of the text)."""
PYTHON_FENCES = frozenset({"python", "python3", "py"})

AFTER_PYTHON_BLOCK = "\x00after-the-first-python-block"
"""A stop that is not a text to find: generation stops once the answer holds a closed
fenced block labelled Python (:data:`PYTHON_FENCES`), and the text keeps that block's
closing fence. The code benchmarks score that block and nothing after it, so what
would follow it cannot change a prediction (``benchmarks/_code.py``)."""


def python_block_end(text: str) -> int:
    """Where the first closed Python-labelled fenced block of ``text`` ends, or -1."""
    for match in FENCE.finditer(text):
        if match.group(3) and match.group(1).lower() in PYTHON_FENCES:
            return match.end()
    return -1


def truncate_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop; say whether one was found.

    A stop string cuts before itself; :data:`AFTER_PYTHON_BLOCK` cuts after the block.
    """
    cuts = [python_block_end(text) if s == AFTER_PYTHON_BLOCK else text.find(s) for s in stops if s]
    cut = min((i for i in cuts if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
