import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.ranking import SCORE_DIGITS, Rank, rank_key, ranks, standings


def brute_force(rows):
    """The definitions of core/ranking.py, pair by pair."""
    out = []
    for i, (score, low, high) in enumerate(rows):
        others = [r for j, r in enumerate(rows) if j != i]
        out.append(
            Rank(
                1 + sum(1 for s, _, _ in others if rank_key(s) > rank_key(score)),
                1 + sum(1 for _, other_low, _ in others if rank_key(other_low) > rank_key(high)),
                len(rows)
                - sum(1 for _, _, other_high in others if rank_key(other_high) < rank_key(low)),
            )
        )
    return out


def test_separate_and_overlapping_intervals():
    assert ranks([(0.85, 0.8, 0.9), (0.55, 0.5, 0.6), (0.15, 0.1, 0.2)]) == [
        (1, 1, 1),
        (2, 2, 2),
        (3, 3, 3),
    ]
    assert ranks([(0.7, 0.5, 0.9), (0.5, 0.4, 0.6), (0.15, 0.1, 0.2)]) == [
        (1, 1, 2),
        (2, 1, 2),
        (3, 3, 3),
    ]
    assert ranks([]) == []


def test_equal_scores_share_a_rank_and_the_next_is_skipped():
    rows = [(0.5, 0.3, 0.7), (0.9, 0.8, 1.0), (0.5, 0.2, 0.8), (0.1, 0.0, 0.2)]
    assert [r.rank for r in ranks(rows)] == [2, 1, 2, 4]
    assert ranks([(0.5, 0.5, 0.5), (0.5, 0.5, 0.5)]) == [(1, 1, 2), (1, 1, 2)]


def test_scores_equal_to_nine_decimals_are_equal():
    """0.1·3 and 0.3 are different doubles; as ranks go they are one score."""
    assert 0.1 * 3 != 0.3 and SCORE_DIGITS == 9
    rows = [(0.1 * 3, 0.1, 0.5), (0.3, 0.1, 0.5), (0.3 + 2e-9, 0.1, 0.5)]
    assert [r.rank for r in ranks(rows)] == [2, 2, 1]


def test_the_rank_of_a_row_does_not_depend_on_the_others_order():
    rng = random.Random(3)
    rows = [(s := round(rng.random(), 2), s - 0.1, s + 0.1) for _ in range(40)]
    shuffled = rows[:]
    rng.shuffle(shuffled)
    board = standings(shuffled)
    assert [board.rank(*r) for r in rows] == ranks(rows)
    assert len(board) == 40


@pytest.mark.parametrize("seed", range(20))
def test_ranks_match_the_pairwise_definition(seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(rng.randint(1, 30)):
        low, high = sorted(round(rng.random(), 1) for _ in range(2))
        rows.append((round(rng.uniform(low, high), 1), low, high))
    assert ranks(rows) == brute_force(rows)


@given(
    st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 0.5), st.floats(0, 0.5)), min_size=1, max_size=25
    )
)
def test_the_rank_lies_in_its_range(raw):
    rows = [(s, max(0.0, s - d), min(1.0, s + u)) for s, d, u in raw]
    for rank, best, worst in ranks(rows):
        assert 1 <= best <= rank <= worst <= len(rows)


def test_rounding_keeps_the_rank_in_its_range():
    """A score 4e-10 above a point interval: one score as ranks go, and one interval."""
    rows = [(0.5, 0.5, 0.5), (0.5 + 4e-10, 0.5 + 4e-10, 0.6)]
    assert ranks(rows) == [(1, 1, 2), (1, 1, 2)]
