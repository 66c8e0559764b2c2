import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumbench.core.allocation import TIE_POLICIES, Standing, allocate, parse_rule
from quorumbench.core.canonical import canonical_json
from quorumbench.core.payouts import check_payouts, payout_record, standings_from_record

STANDINGS = [
    Standing(12, 0.6, 0.5, 0.7, 200),
    Standing(5, 0.9, 0.85, 0.95, 200),
    Standing(7, 0.6, 0.55, 0.65, 200),
    Standing(9, 0.3, 0.2, 0.4, 180, 0.0),
]
RULE = parse_rule("ArithmeticDecrease")


def record(funds=1000, rule=RULE, ties="exact", standings=STANDINGS, pool_id=7, **kw):
    payouts = allocate(funds, standings, rule, ties)
    return payout_record(
        pool_id, funds, rule, ties, standings, payouts, "2026-11-30T00:00:00+00:00", "GSM8K", **kw
    )


def test_record_format():
    rec = record(display={5: {"model_ref": "hf/a", "model_id": 3, "account": "ana"}})
    body = rec["payout"]
    assert body["pool"] == {"id": 7, "title": "GSM8K"}
    assert (body["funds"], body["rule"], body["params"], body["ties"]) == (
        1000,
        "ArithmeticDecrease",
        {"k": 10},
        "exact",
    )
    assert body["ended_at"] == "2026-11-30T00:00:00+00:00"
    assert body["standing"][0] == {
        "entry": 5,
        "score": 0.9,
        "ci_low": 0.85,
        "ci_high": 0.95,
        "n_samples": 200,
        "chance": 0.0,
        "model_ref": "hf/a",
        "model_id": 3,
        "account": "ana",
    }
    assert [row["entry"] for row in body["standing"]] == [a["entry"] for a in body["amounts"]]
    assert [a["amount"] for a in body["amounts"]] == [400, 250, 250, 100]
    assert {a["place"] for a in body["amounts"][1:3]} == {2}
    canonical_json(rec)  # serialisable as a log entry


def test_display_fields_cannot_replace_what_the_allocation_reads():
    with pytest.raises(ValueError, match="score"):
        record(display={5: {"score": 1.0}})


def test_standings_from_record_gives_the_standing_back_best_first():
    rec = record()
    back = standings_from_record(rec)
    assert [s.entry_id for s in back] == [
        p.entry_id for p in allocate(1000, STANDINGS, RULE, "exact")
    ]
    assert sorted(back, key=lambda s: s.entry_id) == sorted(STANDINGS, key=lambda s: s.entry_id)
    with pytest.raises(ValueError, match="not a payout record"):
        standings_from_record({"task": 1})


@pytest.mark.parametrize("ties", TIE_POLICIES)
@pytest.mark.parametrize(
    "rule",
    [
        RULE,
        parse_rule("Geometric", {"q": 0.5}),
        parse_rule("Proportional", {"floor": 0.25}),
        parse_rule("WinnerTakesAll"),
        parse_rule("TopKEqual", {"k": 2}),
    ],
)
def test_an_honest_record_checks_after_a_json_round_trip(rule, ties):
    rec = json.loads(json.dumps(record(funds=1001, rule=rule, ties=ties)))
    assert check_payouts([rec]) == []


def test_check_reads_served_rows_and_skips_other_entries():
    rows = [
        {"index": 0, "leaf_hash": "00", "entry": {"task": {"id": 1}}},
        {"index": 1, "leaf_hash": "11", "entry": record()},
        {"task": {"id": 2}},
        record(pool_id=8),
    ]
    assert check_payouts(rows) == []


def test_nobody_paid_record_checks():
    rule = parse_rule("Proportional", {"floor": 0.95})
    rec = record(rule=rule)
    assert {a["amount"] for a in rec["payout"]["amounts"]} == {0}
    assert check_payouts([rec]) == []


def tampered(change):
    rec = copy.deepcopy(record())
    change(rec["payout"])
    return check_payouts([{"other": 1}, rec])


def _set(path, value):
    def change(body):
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _statistical_with_overlap(body):
    body["ties"] = "statistical"
    body["standing"][3]["ci_high"] = 0.6  # now overlaps the entry above it


def _swap_first_amounts(body):
    a = body["amounts"]
    a[0], a[1] = a[1], a[0]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_set(("amounts", 0, "amount"), 500), "entry 5: logged amount 500, recomputed 400"),
        (_set(("amounts", 0, "amount"), 400.0), "entry 5: logged amount 400.0"),
        (_set(("amounts", 3, "place"), 3), "entry 9: logged place 3, recomputed 4"),
        (_set(("amounts", 3, "group"), 1), "entry 9: logged group 1, recomputed 2"),
        (_set(("standing", 1, "score"), 0.61), "recomputed 300"),  # breaks the tie 12 / 7
        (_set(("funds",), 2000), "recomputed 800"),
        (_set(("params",), {"k": 2}), "recomputed 0"),
        (_set(("rule",), "TopKEqual"), "recomputed 250"),
        (_set(("params",), {}), "not given in full"),
        (_statistical_with_overlap, "recomputed 200"),
        (lambda b: b["amounts"].pop(), "entry 9 has no amount"),
        (lambda b: b["amounts"].append(dict(b["amounts"][0], entry=99)), "entry 99, not in"),
        (lambda b: b["amounts"].append(b["amounts"][0]), "an entry twice"),
        (_swap_first_amounts, "not in place order"),
    ],
)
def test_a_tampered_record_is_caught(change, says):
    problems = tampered(change)
    assert problems
    assert all(p.startswith("log entry 1 (payout of pool 7): ") for p in problems)
    assert any(says in p for p in problems), problems


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda b: b.clear(), "it lacks pool, funds"),
        (_set(("rule",), 3), "rule is not a name"),
        (_set(("params",), [["k", 10]]), "rule is not a name"),
        (_set(("rule",), "Lottery"), "unknown allocation rule"),
        (_set(("params",), {"k": True}), "parameter k"),
        (_set(("standing",), {}), "standing is not a list"),
        (lambda b: b["standing"][0].pop("chance"), "standing row 0 lacks"),
        (_set(("standing", 1), "x"), "standing row 1 lacks"),
        (_set(("standing", 1, "entry"), "5"), "standing row 1: entry is not an integer"),
        (_set(("standing", 1, "entry"), True), "standing row 1: entry is not an integer"),
        (_set(("standing", 1, "score"), 1.5), "score must be"),
        (_set(("standing", 1, "score"), "0.5"), "score must be"),
        (_set(("standing", 1, "entry"), 5), "appears twice"),
        (_set(("amounts", 2), {"entry": 7}), "amounts row 2 lacks"),
        (_set(("funds",), -5), "funds"),
        (_set(("ties",), "fuzzy"), "tie policy"),
    ],
)
def test_a_malformed_record_is_reported_not_raised(change, says):
    problems = tampered(change)
    assert len(problems) == 1
    assert problems[0].startswith("log entry 1 (payout of pool ")
    assert "): cannot recompute: " in problems[0]
    assert says in problems[0]


@pytest.mark.parametrize("payout", [None, "paid", {"pool": "7"}, {"pool": {"title": "x"}}])
def test_a_record_without_a_pool_is_reported(payout):
    problems = check_payouts([{"payout": payout}])
    assert len(problems) == 1
    assert problems[0].startswith("log entry 0 (payout of pool None): cannot recompute")


def test_a_pool_paid_twice_is_caught():
    problems = check_payouts([record(), {"task": 1}, record(), record(pool_id=8)])
    assert problems == ["log entry 2 (payout of pool 7): pool paid out before, at log entry 0"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), min_size=1, max_size=8),
    st.integers(0, 10**6),
    st.sampled_from(TIE_POLICIES),
    st.integers(1, 5),
)
def test_any_honest_record_checks_and_any_changed_amount_is_caught(pairs, funds, ties, k):
    rows = [
        Standing(i, s / 20, max(0, s - w) / 20, min(20, s + w) / 20, 10)
        for i, (s, w) in enumerate(pairs)
    ]
    rec = json.loads(json.dumps(record(funds, parse_rule("Geometric", {"k": k}), ties, rows)))
    assert check_payouts([rec]) == []
    rec["payout"]["amounts"][-1]["amount"] += 1
    assert check_payouts([rec])
