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


def truncate_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop sequence; say whether one was found."""
    cut = min((i for s in stops if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
