"""Model sizes written as numbers, and how the reader splits and stems words."""

from __future__ import annotations

import pytest

from quorumbench.planner.sizes import find_sizes
from quorumbench.planner.text import KO_STOP, only_suffixes, stem, strip_ko, tokens

B, M = 1_000_000_000, 1_000_000


@pytest.mark.parametrize(
    ("query", "text", "low", "high"),
    [
        ("under 1B", "under 1B", None, B),
        ("models below 500M please", "below 500M", None, 500 * M),
        ("at most 1.5 billion parameters", "at most 1.5 billion parameters", None, 15 * B // 10),
        ("up to 3b or less", "up to 3b or less", None, 3 * B),
        ("<= 2B", "<= 2B", None, 2 * B),
        ("at least 13b params", "at least 13b params", 13 * B, None),
        ("over 70B", "over 70B", 70 * B, None),
        ("7b+", "7b+", 7 * B, None),
        ("30B or more", "30B or more", 30 * B, None),
        ("a 7B model", "7B", 56 * B // 10, 84 * B // 10),
        ("1B 이하 모델", "1B 이하", None, B),
        ("70억 파라미터 이상", "70억 파라미터 이상", 7 * B, None),
        ("5억 미만", "5억 미만", None, 500 * M),
        ("3B보다 작은 모델", "3B보다 작은", None, 3 * B),
    ],
)
def test_sizes(query, text, low, high):
    (hit,) = find_sizes(query)
    assert (hit.text, hit.min_params, hit.max_params) == (text, low, high)
    assert query[hit.start : hit.end] == text


@pytest.mark.parametrize(
    "query", ["gsm8k", "top 5 models", "mc1 and mc2", "1.5", "3 bananas", "v2b"]
)
def test_numbers_that_are_not_sizes(query):
    assert find_sizes(query) == []


def test_tokens_keep_spans_and_split_hyphens():
    got = [(t.text, t.norm, t.start) for t in tokens("High-school GSM8K, 한국어로 c++!")]
    assert got == [
        ("High", "high", 0),
        ("school", "school", 5),
        ("GSM8K", "gsm8k", 12),
        ("한국어로", "한국어로", 19),
        ("c++", "c++", 24),
    ]


def test_stems_strip_only_into_known_words():
    known = {"한국어", "거절", "refuse", "bias", "study"} | KO_STOP
    assert stem("한국어로", known) == "한국어"
    assert stem("거절하면서도", known) == "거절"
    assert stem("고등학교", known) == "고등학교"  # nothing known inside: kept whole
    assert stem("refuses", known) == "refuse"
    assert stem("refusing", known) == "refuse"
    assert stem("biases", known) == "bias"
    assert stem("studies", known) == "study"
    assert stem("buses", known) == "buses"
    assert strip_ko("사과를", known) is None
    assert only_suffixes("") and only_suffixes("에서는") and not only_suffixes("학교")
