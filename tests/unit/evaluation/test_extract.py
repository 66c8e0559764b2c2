import pytest

from quorumbench.evaluation.extract import (
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
