import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumbench.benchmarks._code import fenced_code
from quorumbench.evaluation.extract import (
    AFTER_PYTHON_BLOCK,
    extract_final_number,
    last_number,
    normalize_number,
    truncate_at_stop,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("18", "18"),
        ("1,234", "1234"),
        ("$1,200.00", "1200"),
        ("$ 5", "5"),
        ("3.50", "3.5"),
        ("3.0", "3"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("+7", "7"),
        ("007", "7"),
        ("-012", "-12"),
        ("0.25", "0.25"),
        ("42.", "42"),
    ],
)
def test_normalize_number(raw, expected):
    assert normalize_number(raw) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She sells 9 eggs for $2 each.\n#### 18", "18"),
        ("#### $1,000", "1000"),
        ("####18.00 dollars", "18"),
        ("First 3 then 4.\n#### 7\nQuestion: 12", "7"),  # the marker wins over later numbers
        ("The answer is 12, not 13.", "13"),  # without a marker, the last number
        ("Total: $2,400.50.", "2400.5"),
        ("#### -5", "-5"),
        ("no digits here", None),
        ("#### unknown, maybe 4", "4"),
    ],
)
def test_extract_final_number(text, expected):
    assert extract_final_number(text) == expected


def test_last_number_none():
    assert last_number("") is None


@pytest.mark.parametrize(
    ("text", "stops", "expected"),
    [
        ("a Question: b", ("Question:",), ("a ", True)),
        ("abc", ("x",), ("abc", False)),
        ("a\n\nb</s>c", ("</s>", "\n\n"), ("a", True)),  # the earliest stop wins
        ("abc", ("",), ("abc", False)),
    ],
)
def test_truncate_at_stop(text, stops, expected):
    assert truncate_at_stop(text, stops) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```python\nx = 1\n```\nThis sets x.", ("```python\nx = 1\n```", True)),
        ("Here:\n```py\nx = 1\n``` and more", ("Here:\n```py\nx = 1\n```", True)),
        ("```python\nx = 1\n", ("```python\nx = 1\n", False)),  # still open: go on
        ("```\nx = 1\n```\nno language", ("```\nx = 1\n```\nno language", False)),
        ("```text\nhi\n```\n```python\nx\n```\n", ("```text\nhi\n```\n```python\nx\n```", True)),
        ("no code at all", ("no code at all", False)),
    ],
)
def test_the_python_block_rule_cuts_after_the_closing_fence(text, expected):
    assert truncate_at_stop(text, (AFTER_PYTHON_BLOCK,)) == expected


def test_a_stop_string_before_the_block_still_wins():
    assert truncate_at_stop("a<|end|>```python\nx\n```", ("<|end|>", AFTER_PYTHON_BLOCK)) == (
        "a",
        True,
    )


_PIECES = st.sampled_from(
    ["```", "```python\n", "```py\n", "```text\n", "```\n", "python", "\n", "x = 1", " ", "`"]
)


@settings(max_examples=400)
@given(st.lists(_PIECES, max_size=14))
def test_stopping_at_the_python_block_never_changes_the_scored_code(pieces):
    """Generation checks the rule after every token; wherever it first stops, the code
    the benchmarks score is the code of the whole answer."""
    full = "".join(pieces)
    for end in range(len(full) + 1):
        cut, stopped = truncate_at_stop(full[:end], (AFTER_PYTHON_BLOCK,))
        if stopped:
            assert fenced_code(cut) == fenced_code(full)
            assert full.startswith(cut)
            break
