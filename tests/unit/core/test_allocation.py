import hashlib
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumbench.core.allocation import (
    RULES,
    TIE_POLICIES,
    Payout,
    Rule,
    Standing,
    allocate,
    parse_rule,
)


def sha(entry_id):
    return hashlib.sha256(str(entry_id).encode()).hexdigest()


def board(*scores, ids=None, width=0.0, chance=0.0):
    """Standings with the given scores (ids 1.., or ``ids``), intervals score ± width."""
    ids = ids or range(1, len(scores) + 1)
    return [
        Standing(i, s, max(0.0, s - width), min(1.0, s + width), 100, chance)
        for i, s in zip(ids, scores, strict=True)
    ]


def amounts(payouts):
    return [p.amount for p in payouts]


# --- parse_rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("ArithmeticDecrease", None, (("k", 10),)),
        ("ArithmeticDecrease", {"k": 4}, (("k", 4),)),
        ("Geometric", {}, (("k", 10), ("q", 0.3))),
        ("Geometric", {"q": 0.5, "k": 3}, (("k", 3), ("q", 0.5))),
        ("Geometric", {"q": 0.5}, (("k", 10), ("q", 0.5))),
        ("Proportional", None, (("floor", 0.0),)),
        ("Proportional", {"floor": 0}, (("floor", 0.0),)),
        ("WinnerTakesAll", {}, ()),
        ("TopKEqual", None, (("k", 3),)),
    ],
)
def test_parse_rule_fills_defaults_in_canonical_order(name, params, expected):
    rule = parse_rule(name, params)
    assert rule == Rule(name, expected)
    assert rule.as_dict() == dict(expected)
    assert isinstance(rule.as_dict().get("floor", 0.0), float)


def test_every_rule_parses():
    assert {parse_rule(name).name for name in RULES} == set(RULES)
    assert TIE_POLICIES == ("exact", "statistical")


@pytest.mark.parametrize(
    ("name", "params", "names"),
    [
        ("Lottery", None, "Lottery"),
        ("arithmeticdecrease", None, "arithmeticdecrease"),
        ("ArithmeticDecrease", {"q": 0.3}, "'q'"),
        ("WinnerTakesAll", {"k": 1}, "'k'"),
        ("TopKEqual", {"k": True}, "parameter k"),
        ("TopKEqual", {"k": 2.0}, "parameter k"),
        ("TopKEqual", {"k": "3"}, "parameter k"),
        ("ArithmeticDecrease", {"k": 0}, "parameter k"),
        ("Geometric", {"k": -1}, "parameter k"),
        ("Geometric", {"q": 0}, "parameter q"),
        ("Geometric", {"q": 1.0}, "parameter q"),
        ("Geometric", {"q": 1.5}, "parameter q"),
        ("Geometric", {"q": False}, "parameter q"),
        ("Geometric", {"q": "0.3"}, "parameter q"),
        ("Geometric", {"q": math.nan}, "parameter q"),
        ("Proportional", {"floor": 1.0}, "parameter floor"),
        ("Proportional", {"floor": -0.1}, "parameter floor"),
        ("Proportional", {"floor": math.inf}, "parameter floor"),
        ("Proportional", {"floor": True}, "parameter floor"),
    ],
)
def test_parse_rule_rejects_bad_names_and_parameters(name, params, names):
    with pytest.raises(ValueError, match=names) as err:
        parse_rule(name, params)
    assert "\n" not in str(err.value)


# --- known answers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "params", "funds", "scores", "expected"),
    [
        ("ArithmeticDecrease", None, 1000, [0.9, 0.8, 0.7, 0.6], [400, 300, 200, 100]),
        ("ArithmeticDecrease", {"k": 2}, 900, [0.9, 0.8, 0.7, 0.6], [600, 300, 0, 0]),
        ("ArithmeticDecrease", None, 100, [0.5], [100]),
        ("ArithmeticDecrease", None, 10, [0.9, 0.8, 0.7], [5, 3, 2]),  # 5, 3.33, 1.67
        ("Geometric", {"q": 0.5}, 700, [0.9, 0.8, 0.7], [400, 200, 100]),
        ("Geometric", None, 1390, [0.9, 0.8, 0.7], [1000, 300, 90]),  # 1, 0.3, 0.09
        ("Geometric", {"q": 0.5, "k": 2}, 300, [0.9, 0.8, 0.7], [200, 100, 0]),
        ("WinnerTakesAll", None, 1000, [0.9, 0.8, 0.7], [1000, 0, 0]),
        ("TopKEqual", None, 900, [0.9, 0.8, 0.7, 0.6], [300, 300, 300, 0]),
        ("TopKEqual", {"k": 2}, 1001, [0.9, 0.8, 0.7], [501, 500, 0]),  # better place
        ("TopKEqual", {"k": 5}, 100, [0.9, 0.8], [50, 50]),
        ("Proportional", None, 1800, [0.9, 0.6, 0.3], [900, 600, 300]),
        ("Proportional", {"floor": 0.5}, 1000, [0.9, 0.6, 0.3], [800, 200, 0]),
        ("Proportional", None, 1000, [0.3, 0.0], [1000, 0]),
    ],
)
def test_known_answers(rule, params, funds, scores, expected):
    payouts = allocate(funds, board(*scores), parse_rule(rule, params), "exact")
    assert amounts(payouts) == expected
    assert [p.place for p in payouts] == list(range(1, len(scores) + 1))
    assert [p.group for p in payouts] == list(range(len(scores)))


def test_proportional_corrects_for_chance():
    # corrected = (s - 0.25) / 0.75: 13/15, 7/15, 1/15 and 0 (below chance) -> 13 : 7 : 1
    payouts = allocate(
        2100, board(0.9, 0.6, 0.3, 0.2, chance=0.25), parse_rule("Proportional"), "exact"
    )
    assert amounts(payouts) == [1300, 700, 100, 0]


@pytest.mark.parametrize("scores", [[0.5, 0.4], [0.2, 0.25]])
def test_proportional_pays_nobody_at_or_below_the_floor(scores):
    rule = parse_rule("Proportional", {"floor": 0.5})
    payouts = allocate(1000, board(*scores), rule, "statistical")
    assert amounts(payouts) == [0, 0]


def test_nobody_to_pay():
    assert allocate(1000, [], parse_rule("ArithmeticDecrease"), "exact") == []
    assert amounts(allocate(0, board(0.9, 0.8), parse_rule("TopKEqual"), "exact")) == [0, 0]


def test_floats_enter_as_the_decimals_they_print_as():
    # q = 0.3 is exactly 3/10, so 1390 splits 1000 / 300 / 90 with nothing left over;
    # a score of 0.1 is 1/10 (binary 0.1 is a little more).
    rule = parse_rule("Proportional")
    payouts = allocate(3, board(0.2, 0.1), rule, "exact")
    assert amounts(payouts) == [2, 1]
    assert Fraction(repr(0.3)) == Fraction(3, 10)


# --- ties ---------------------------------------------------------------------------------


def test_exact_tie_shares_the_places_shares():
    payouts = allocate(1000, board(0.9, 0.8, 0.8, 0.6), parse_rule("ArithmeticDecrease"), "exact")
    assert amounts(payouts) == [400, 250, 250, 100]
    assert [p.place for p in payouts] == [1, 2, 2, 4]
    assert [p.group for p in payouts] == [0, 1, 1, 2]


def test_a_tie_leftover_unit_goes_by_hash_not_by_id():
    # ids 2 and 3 tie for the two paid places: 500.5 each; sha256("3") < sha256("2").
    assert sha(3) < sha(2)
    standings = board(0.9, 0.9, 0.7, ids=[2, 3, 1])
    payouts = allocate(1001, standings, parse_rule("TopKEqual", {"k": 2}), "exact")
    assert [(p.entry_id, p.amount, p.place) for p in payouts] == [
        (3, 501, 1),
        (2, 500, 1),
        (1, 0, 3),
    ]


def test_three_way_tie_orders_by_hash():
    payouts = allocate(1000, board(0.5, 0.5, 0.5, ids=[1, 2, 3]), parse_rule("Geometric"), "exact")
    assert [p.entry_id for p in payouts] == sorted([1, 2, 3], key=sha)
    assert amounts(payouts) == [334, 333, 333]
    assert {p.place for p in payouts} == {1}


def test_winner_takes_all_split_by_a_tie_at_the_top():
    payouts = allocate(1000, board(0.9, 0.9, 0.5), parse_rule("WinnerTakesAll"), "exact")
    assert sorted(amounts(payouts)) == [0, 500, 500]


def test_statistical_groups_overlapping_neighbours_across_paid_boundaries():
    standings = [
        Standing(1, 0.9, 0.85, 0.95, 100),
        Standing(2, 0.8, 0.75, 0.88, 100),  # overlaps 1
        Standing(3, 0.7, 0.60, 0.74, 100),  # does not overlap 2
        Standing(4, 0.5, 0.40, 0.60, 100),  # touches 3 (closed intervals)
    ]
    rule = parse_rule("ArithmeticDecrease")
    stat = allocate(1000, standings, rule, "statistical")
    assert amounts(stat) == [350, 350, 150, 150]
    assert [p.place for p in stat] == [1, 1, 3, 3]
    assert [p.group for p in stat] == [0, 0, 1, 1]
    assert amounts(allocate(1000, standings, rule, "exact")) == [400, 300, 200, 100]


def test_statistical_merging_is_transitive_along_the_order():
    standings = [
        Standing(1, 0.9, 0.80, 0.95, 50),
        Standing(2, 0.8, 0.70, 0.90, 50),
        Standing(3, 0.7, 0.55, 0.75, 50),  # overlaps 2 but not 1
    ]
    payouts = allocate(900, standings, parse_rule("ArithmeticDecrease"), "statistical")
    assert amounts(payouts) == [300, 300, 300]
    assert {p.group for p in payouts} == {0}
    # Places 2 and 3 both pay nothing under WinnerTakesAll: that boundary is not a paid one.
    payouts = allocate(900, standings, parse_rule("WinnerTakesAll"), "statistical")
    assert amounts(payouts) == [450, 450, 0]
    assert [p.group for p in payouts] == [0, 0, 1]


def test_statistical_leaves_unpaid_boundaries_alone():
    # k = 2: places 3 and 4 are both unpaid; TopKEqual's places 1 and 2 pay the same.
    standings = board(0.9, 0.7, 0.5, 0.45, width=0.01)
    payouts = allocate(300, standings, parse_rule("ArithmeticDecrease", {"k": 2}), "statistical")
    assert [p.group for p in payouts] == [0, 1, 2, 3]
    standings = board(0.9, 0.89, 0.5, width=0.05)
    payouts = allocate(300, standings, parse_rule("TopKEqual", {"k": 2}), "statistical")
    assert [p.group for p in payouts] == [0, 1, 2]
    assert amounts(payouts) == [150, 150, 0]


def test_statistical_crosses_the_last_paid_boundary():
    standings = board(0.9, 0.7, 0.68, width=0.05)
    payouts = allocate(300, standings, parse_rule("TopKEqual", {"k": 2}), "statistical")
    assert [p.group for p in payouts] == [0, 1, 1]
    assert amounts(payouts) == [150, 75, 75]


def test_statistical_keeps_exact_ties_together_where_nothing_is_paid():
    payouts = allocate(100, board(0.9, 0.5, 0.5), parse_rule("WinnerTakesAll"), "statistical")
    assert [p.group for p in payouts] == [0, 1, 1]
    assert [p.place for p in payouts] == [1, 2, 2]


def test_statistical_proportional_averages_the_group():
    standings = [Standing(1, 0.6, 0.5, 0.7, 10), Standing(2, 0.5, 0.4, 0.6, 10)]
    rule = parse_rule("Proportional")
    assert amounts(allocate(1100, standings, rule, "exact")) == [600, 500]
    assert amounts(allocate(1100, standings, rule, "statistical")) == [550, 550]


# --- bad input ----------------------------------------------------------------------------

GOOD = Standing(1, 0.5, 0.4, 0.6, 10)


@pytest.mark.parametrize(
    ("funds", "standings", "rule", "ties", "names"),
    [
        (-1, [GOOD], parse_rule("WinnerTakesAll"), "exact", "funds"),
        (1.5, [GOOD], parse_rule("WinnerTakesAll"), "exact", "funds"),
        (True, [GOOD], parse_rule("WinnerTakesAll"), "exact", "funds"),
        (10, [GOOD], Rule("Lottery", ()), "exact", "Lottery"),
        (10, [GOOD], Rule("Geometric", (("k", 10), ("q", 2.0))), "exact", "parameter q"),
        (10, [GOOD], parse_rule("WinnerTakesAll"), "fuzzy", "tie policy"),
        (10, [GOOD, GOOD], parse_rule("WinnerTakesAll"), "exact", "twice"),
        (10, [Standing(1, 1.5, 0.4, 1.6, 10)], parse_rule("TopKEqual"), "exact", "score"),
        (10, [Standing(1, math.nan, 0.4, 0.6, 10)], parse_rule("TopKEqual"), "exact", "score"),
        (10, [Standing(1, True, 0.4, 1.0, 10)], parse_rule("TopKEqual"), "exact", "score"),
        (10, [Standing(1, 0.5, -0.1, 0.6, 10)], parse_rule("TopKEqual"), "exact", "ci_low"),
        (10, [Standing(1, 0.5, 0.4, 1.1, 10)], parse_rule("TopKEqual"), "exact", "ci_high"),
        (10, [Standing(1, 0.5, 0.55, 0.6, 10)], parse_rule("TopKEqual"), "exact", "ci_low <="),
        (10, [Standing(1, 0.5, 0.4, 0.45, 10)], parse_rule("TopKEqual"), "exact", "ci_low <="),
        (10, [Standing(1, 0.5, 0.4, 0.6, 10, 1.0)], parse_rule("Proportional"), "exact", "chance"),
        (10, [Standing(1, 0.5, 0.4, 0.6, 10, -0.1)], parse_rule("Proportional"), "exact", "chance"),
        (10, [Standing(1, 0.5, 0.4, 0.6, -1)], parse_rule("TopKEqual"), "exact", "n_samples"),
        (10, [Standing(1, 0.5, 0.4, 0.6, True)], parse_rule("TopKEqual"), "exact", "n_samples"),
    ],
)
def test_allocate_rejects_bad_input(funds, standings, rule, ties, names):
    with pytest.raises(ValueError, match=names):
        allocate(funds, standings, rule, ties)


# --- properties ---------------------------------------------------------------------------

SCORES = st.integers(0, 20).map(lambda i: i / 20)  # few values, so ties are common


@st.composite
def standings(draw, min_size=0):
    ids = draw(st.lists(st.integers(0, 10_000), min_size=min_size, max_size=12, unique=True))
    chance = draw(st.sampled_from([0.0, 0.25, 0.5]))
    rows = []
    for entry_id in ids:
        score = draw(SCORES)
        low = draw(st.floats(0, score)) if score > 0 else 0.0
        high = draw(st.floats(score, 1)) if score < 1 else 1.0
        rows.append(Standing(entry_id, score, low, high, draw(st.integers(0, 500)), chance))
    return rows


RULE = st.one_of(
    st.builds(lambda k: parse_rule("ArithmeticDecrease", {"k": k}), st.integers(1, 12)),
    st.builds(
        lambda k, q: parse_rule("Geometric", {"k": k, "q": q}),
        st.integers(1, 12),
        st.sampled_from([0.1, 0.3, 0.5, 0.9, 0.77]),
    ),
    st.builds(lambda f: parse_rule("Proportional", {"floor": f}), st.sampled_from([0, 0.2, 0.5])),
    st.just(parse_rule("WinnerTakesAll")),
    st.builds(lambda k: parse_rule("TopKEqual", {"k": k}), st.integers(1, 12)),
)
FUNDS = st.integers(0, 10**7)
TIES = st.sampled_from(TIE_POLICIES)


def nobody_paid(rows, rule):
    if not rows:
        return True
    if rule.name != "Proportional":
        return False
    floor = Fraction(repr(rule.as_dict()["floor"]))
    chance = Fraction(repr(rows[0].chance))
    return all((Fraction(repr(s.score)) - chance) / (1 - chance) <= floor for s in rows)


@settings(max_examples=150, deadline=None)
@given(standings(), RULE, FUNDS, TIES)
def test_amounts_are_non_negative_ints_summing_to_the_funds(rows, rule, funds, ties):
    payouts = allocate(funds, rows, rule, ties)
    assert sorted(p.entry_id for p in payouts) == sorted(s.entry_id for s in rows)
    assert all(type(p.amount) is int and p.amount >= 0 for p in payouts)
    total = sum(amounts(payouts))
    assert total == (0 if nobody_paid(rows, rule) else funds)


@settings(max_examples=150, deadline=None)
@given(standings(), RULE, FUNDS, TIES)
def test_better_places_never_get_less_and_ties_within_one_unit(rows, rule, funds, ties):
    payouts = allocate(funds, rows, rule, ties)
    by_id = {s.entry_id: s for s in rows}
    assert [by_id[p.entry_id].score for p in payouts] == sorted(
        (s.score for s in rows), reverse=True
    )
    for better, worse in zip(payouts, payouts[1:], strict=False):
        assert worse.group in (better.group, better.group + 1)
        if worse.group == better.group:
            assert worse.place == better.place
            if ties == "exact":
                assert by_id[worse.entry_id].score == by_id[better.entry_id].score
        else:
            assert worse.place == payouts.index(worse) + 1
    groups: dict[int, list[int]] = {}
    for p in payouts:
        groups.setdefault(p.group, []).append(p.amount)
    for g, members in groups.items():
        assert max(members) - min(members) <= 1
        if g + 1 in groups:
            assert min(members) >= max(groups[g + 1])


@settings(max_examples=100, deadline=None)
@given(standings(min_size=1), RULE, FUNDS, TIES, st.randoms(use_true_random=False))
def test_permuting_the_entries_changes_nothing(rows, rule, funds, ties, rnd):
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert allocate(funds, shuffled, rule, ties) == allocate(funds, rows, rule, ties)


@settings(max_examples=100, deadline=None)
@given(standings(), RULE, FUNDS)
def test_statistical_groups_are_unions_of_exact_groups(rows, rule, funds):
    exact = allocate(funds, rows, rule, "exact")
    stat = {p.entry_id: p.group for p in allocate(funds, rows, rule, "statistical")}
    for a, b in zip(exact, exact[1:], strict=False):
        if a.group == b.group:
            assert stat[a.entry_id] == stat[b.entry_id]


def test_payout_is_a_plain_value():
    assert Payout(1, 1, 0, 5) == Payout(1, 1, 0, 5)


def test_statistical_compares_a_tie_by_the_union_of_its_intervals():
    # 2 and 3 tie at 0.6; only 3's interval reaches entry 4, whichever of them sorts last.
    for ids in ([2, 3], [3, 2]):
        standings = [
            Standing(1, 0.9, 0.9, 0.9, 10),
            Standing(ids[0], 0.6, 0.58, 0.62, 10),
            Standing(ids[1], 0.6, 0.5, 0.7, 10),
            Standing(4, 0.5, 0.4, 0.55, 10),
        ]
        payouts = allocate(1000, standings, parse_rule("ArithmeticDecrease"), "statistical")
        assert amounts(payouts) == [400, 200, 200, 200]
        assert [p.group for p in payouts] == [0, 1, 1, 1]
