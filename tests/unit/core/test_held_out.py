import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumbench.core.held_out import check_held_out
from quorumbench.core.intervals import score_interval

POOL = 7
BENCH = "pool-7-final"
CUTOFF = "2026-11-30T00:00:00+00:00"
BEFORE = "2026-11-29T12:00:00+00:00"
AFTER = "2026-12-01T00:00:00+00:00"
WHERE = "log entry 3 (payout of pool 7)"  # the payout is the fourth entry of `log`


def task(task_id, model, samples, *, pool=POOL, bench=None, status="DONE", decided_at=BEFORE):
    """A held-out task's log entry (``services/publiclog.log_entry``)."""
    samples = list(samples)
    bench = f"pool-{pool}-final" if bench is None else bench
    return {
        "task": {
            "id": task_id,
            "epoch": 1,
            "model": {"id": model, "ref": f"hf/m{model}"},
            "benchmark": {"name": bench, "version": 1, "dataset_sha256": "ab" * 32},
            "quorum": 2,
            "n_samples": len(samples),
            "sample_ids": [f"s{i}" for i in range(len(samples))],
            "purpose": "pool_final",
            "plan": None,
            "pool": pool,
        },
        "results": [],
        "consensus": {
            "status": status,
            "score": sum(samples) / len(samples) if samples else None,
            "sample_consensus": samples,
            "round": 1,
            "decided_at": decided_at,
        },
    }


def row(model, samples):
    """The standing row of model ``model``'s entry (entry id 100 + model) over ``samples``."""
    n, total = len(samples), sum(samples)
    low, high = score_interval(total, n)
    return {
        "entry": 100 + model,
        "score": total / n,
        "ci_low": low,
        "ci_high": high,
        "n_samples": n,
        "chance": 0.0,
        "model_id": model,
    }


def standing_of(counted):
    by_model = {}
    for entry in counted:
        samples = entry["consensus"]["sample_consensus"]
        by_model.setdefault(entry["task"]["model"]["id"], []).extend(samples)
    return [row(model, samples) for model, samples in sorted(by_model.items())]


def payout(counted, *, listed=None, standing=None, pool=POOL, standing_at=CUTOFF):
    """A payout record whose standing counts the task entries ``counted``
    (``services/pool_ticks.settle``, ``services/pool_final.split_record``)."""
    return {
        "payout": {
            "pool": {"id": pool, "title": "GSM8K"},
            "funds": 1000,
            "rule": "WinnerTakesAll",
            "params": {},
            "ties": "exact",
            "ended_at": CUTOFF,
            "standing": standing_of(counted) if standing is None else standing,
            "amounts": [],
            "standing_at": standing_at,
            "final_split": {
                "sha256": "cd" * 32,
                "url": "https://example.org/final.jsonl",
                "used": True,
                "benchmark": {"name": f"pool-{pool}-final", "version": 1, "dataset_sha256": "ab"},
                "spec_sha256": "ef" * 32,
                "tasks": [e["task"]["id"] for e in counted] if listed is None else listed,
            },
        }
    }


def served(entries):
    return [{"index": i, "leaf_hash": "00" * 32, "entry": e} for i, e in enumerate(entries)]


T1 = task(1, 3, [1.0, 0.0, 1.0, 1.0])
T2 = task(2, 3, [0.5, 1.0])
T3 = task(3, 4, [0.0, 0.0, 1.0])


def log(**kw):
    return [T1, T2, T3, payout([T1, T2, T3], **kw)]


@pytest.mark.parametrize("form", [list, served])
def test_a_correct_record_checks_clean(form):
    entries = log()
    assert entries[3]["payout"]["standing"][0]["n_samples"] == 6
    assert check_held_out(form(entries)) == ([], 1)


def test_every_used_record_is_checked_against_its_own_pool():
    other = [task(11, 3, [1.0], pool=8), task(12, 5, [0.25, 0.75], pool=8)]
    entries = [*log(), *other, payout(other, pool=8)]
    assert check_held_out(entries) == ([], 2)


def _unused(entries):
    entries[3]["payout"]["final_split"] = {"sha256": "cd", "url": None, "used": False, "why": "x"}


def _no_split(entries):
    del entries[3]["payout"]["final_split"]


def _split_not_a_mapping(entries):
    entries[3]["payout"]["final_split"] = ["used"]


def _used_not_true(entries):
    entries[3]["payout"]["final_split"]["used"] = "true"


def _payout_not_a_mapping(entries):
    entries[3]["payout"] = "paid"


def _no_payout(entries):
    del entries[3]


@pytest.mark.parametrize(
    "spoil",
    [_unused, _no_split, _split_not_a_mapping, _used_not_true, _payout_not_a_mapping, _no_payout],
)
def test_records_without_a_used_split_are_skipped(spoil):
    entries = copy.deepcopy(log(standing=[]))  # would fail the check if it were made
    spoil(entries)
    assert check_held_out(entries) == ([], 0)
    assert check_held_out(served(entries)) == ([], 0)


def test_a_listed_task_missing_from_the_log():
    assert check_held_out(log(listed=[1, 2, 3, 99])) == (
        [f"{WHERE}: held-out task 99 is not in the log"],
        1,
    )


@pytest.mark.parametrize(
    "stranger",
    [
        task(2, 3, [0.5, 1.0], pool=8),  # another pool's held-out task
        {**T2, "task": {**T2["task"], "purpose": "deepen"}},  # not a held-out task
    ],
)
def test_a_listed_task_that_is_not_this_pools_held_out_task(stranger):
    entries = [T1, stranger, T3, payout([T1, T3], listed=[1, 2, 3])]
    assert check_held_out(entries) == ([f"{WHERE}: held-out task 2 is not in the log"], 1)


def test_a_listed_task_on_another_benchmark():
    entries = [T1, task(2, 3, [0.5, 1.0], bench="GSM8K"), T3, payout([T1, T3], listed=[1, 2, 3])]
    assert check_held_out(entries) == (
        [f"{WHERE}: held-out task 2 is not on benchmark {BENCH}"],
        1,
    )


def test_a_record_with_no_benchmark_matches_no_task():
    entries = log()
    del entries[3]["payout"]["final_split"]["benchmark"]
    problems, _ = check_held_out(entries)
    assert f"{WHERE}: held-out task 1 is not on benchmark None" in problems
    assert len(problems) == 3 + 2  # three tasks, then both entries have none counted


@pytest.mark.parametrize("status", ["DISPUTED", "PENDING"])
def test_a_listed_task_not_done(status):
    entries = [T1, task(2, 3, [0.5, 1.0], status=status), T3, payout([T1, T3], listed=[1, 2, 3])]
    assert check_held_out(entries) == ([f"{WHERE}: held-out task 2 is not DONE"], 1)


def test_a_task_listed_twice():
    assert check_held_out(log(listed=[1, 2, 2, 3])) == (
        [f"{WHERE}: held-out task 2 is listed more than once"],
        1,
    )


@pytest.mark.parametrize("decided_at", [BEFORE, CUTOFF])
def test_a_task_done_by_the_cut_off_left_out(decided_at):
    entries = [T1, task(2, 3, [0.5, 1.0], decided_at=decided_at), T3, payout([T1, T3])]
    assert check_held_out(entries) == (
        [f"{WHERE}: held-out task 2 was DONE by the cut-off but not counted"],
        1,
    )


@pytest.mark.parametrize(
    "late",
    [
        task(2, 3, [0.5, 1.0], decided_at=AFTER),
        task(2, 3, [0.5, 1.0], status="DISPUTED"),
        task(2, 3, [], status="PENDING", decided_at=None),
        task(2, 3, [0.5, 1.0], decided_at="yesterday"),
        task(2, 3, [0.5, 1.0], pool=8),
    ],
)
def test_tasks_not_required_by_the_cut_off(late):
    assert check_held_out([T1, late, T3, payout([T1, T3])]) == ([], 1)


def test_an_unparsable_cut_off_requires_no_task():
    assert check_held_out([T1, T2, T3, payout([T1, T3], standing_at="soon")]) == ([], 1)
    assert check_held_out([T1, T2, T3, payout([T1, T3], standing_at=None)]) == ([], 1)


def test_wrong_n_samples():
    entries = log()
    entries[3]["payout"]["standing"][0]["n_samples"] = 7
    entries[3]["payout"]["standing"][0]["score"] = 0.0  # not reported: n differs already
    assert check_held_out(entries) == (
        [f"{WHERE}: entry 103: logged n_samples 7, recomputed 6"],
        1,
    )


@pytest.mark.parametrize("field", ["score", "ci_low", "ci_high"])
@pytest.mark.parametrize("delta", [1e-6, -1e-6])
def test_a_wrong_score_or_limit(field, delta):
    entries = log()
    first = entries[3]["payout"]["standing"][0]
    want = first[field]
    first[field] = want + delta
    assert check_held_out(entries) == (
        [f"{WHERE}: entry 103: logged {field} {want + delta!r}, recomputed {want!r}"],
        1,
    )


@pytest.mark.parametrize("field", ["score", "ci_low", "ci_high"])
def test_a_score_within_the_tolerance(field):
    entries = log()
    entries[3]["payout"]["standing"][1][field] += 1e-12
    assert check_held_out(entries) == ([], 1)


@pytest.mark.parametrize("got", ["0.75", None, True, float("nan"), math.inf, [0.75]])
def test_a_score_that_is_not_a_number(got):
    entries = log()
    entries[3]["payout"]["standing"][0]["score"] = got
    problems, checked = check_held_out(entries)
    assert checked == 1
    assert problems == [f"{WHERE}: entry 103: logged score {got!r}, recomputed 0.75"]


def test_an_integer_score_is_a_number_and_a_boolean_is_not():
    t = task(1, 3, [1.0, 1.0])
    entries = [t, payout([t])]
    entries[1]["payout"]["standing"][0]["score"] = 1
    assert check_held_out(entries) == ([], 1)
    entries[1]["payout"]["standing"][0]["score"] = True  # JSON true is not the number 1
    assert check_held_out(entries) == (
        ["log entry 1 (payout of pool 7): entry 103: logged score True, recomputed 1.0"],
        1,
    )


def test_an_entry_with_no_counted_task():
    standing = [*standing_of([T1, T2, T3]), row(5, [1.0])]
    assert check_held_out(log(standing=standing)) == (
        [f"{WHERE}: entry 105 has no counted held-out task"],
        1,
    )


def test_a_counted_model_missing_from_the_standing():
    assert check_held_out(log(standing=standing_of([T1, T2]))) == (
        [f"{WHERE}: model 4's counted held-out tasks are not in the standing"],
        1,
    )


def test_no_standing_at_all():
    entries = log()
    del entries[3]["payout"]["standing"]
    assert check_held_out(entries)[0] == [
        f"{WHERE}: model 3's counted held-out tasks are not in the standing",
        f"{WHERE}: model 4's counted held-out tasks are not in the standing",
    ]


def test_a_task_without_per_sample_scores_counts_its_score_n_times():
    t = task(2, 3, [0.5, 1.0])
    t["task"]["n_samples"] = 4
    t["consensus"].update(sample_consensus=[], score=0.75)
    entries = [T1, t, T3, payout([T1, T3], listed=[1, 2, 3], standing=None)]
    entries[3]["payout"]["standing"] = standing_of([T1, T3, task(2, 3, [0.75] * 4)])
    assert check_held_out(entries) == ([], 1)
    entries[3]["payout"]["standing"] = standing_of([T1, T3, task(2, 3, [0.75])])
    assert f"{WHERE}: entry 103: logged n_samples 5, recomputed 8" in check_held_out(entries)[0]


def test_a_task_with_no_scores_at_all_counts_nothing():
    t = task(1, 3, [])
    t["task"]["n_samples"] = 4
    entries = [t, payout([t], standing=[row(3, [1.0])])]
    assert check_held_out(entries) == (
        ["log entry 1 (payout of pool 7): entry 103 has no counted held-out task"],
        1,
    )


def test_a_record_of_no_pool_finds_no_task():
    entries = log()
    del entries[3]["payout"]["pool"]
    problems, checked = check_held_out(entries)
    assert checked == 1
    assert "log entry 3 (payout of pool None): held-out task 1 is not in the log" in problems


def _no_consensus(entries):
    del entries[1]["consensus"]


def _no_status(entries):
    del entries[1]["consensus"]["status"]


def _no_model(entries):
    del entries[1]["task"]["model"]


def _no_n_samples(entries):
    entries[1]["consensus"]["sample_consensus"] = []
    del entries[1]["task"]["n_samples"]


def _text_sample(entries):
    entries[1]["consensus"]["sample_consensus"] = ["half", 1.0]


def _naive_decided_at(entries):  # an uncounted task's time cannot meet the cut-off's
    entries.append(task(9, 3, [1.0], decided_at="2026-11-29T12:00:00"))


def _standing_not_a_list(entries):
    entries[3]["payout"]["standing"] = None


def _unhashable_task_id(entries):
    entries[3]["payout"]["final_split"]["tasks"] = [[1]]


@pytest.mark.parametrize(
    ("spoil", "error"),
    [
        (_no_consensus, "KeyError('consensus')"),
        (_no_status, "KeyError('status')"),
        (_no_model, "KeyError('model')"),
        (_no_n_samples, "KeyError('n_samples')"),
        (_text_sample, "ValueError("),
        (_naive_decided_at, "TypeError("),
        (_standing_not_a_list, "TypeError("),
        (_unhashable_task_id, "TypeError("),
    ],
)
def test_a_malformed_record_cannot_be_recomputed(spoil, error):
    entries = copy.deepcopy(log())
    spoil(entries)
    fine = task(21, 5, [1.0], pool=8)
    problems, checked = check_held_out([*entries, fine, payout([fine], pool=8)])
    assert checked == 2  # the other pool's record is still checked, and clean
    assert len(problems) == 1
    assert problems[0].startswith(f"{WHERE}: cannot recompute the held-out standing: {error}")


# Per model, 1 to 4 models, scores in [0, 1] (whole and fractional), cut into tasks.
_MODELS = st.lists(
    st.lists(
        st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1, allow_subnormal=False)),
        min_size=1,
        max_size=40,
    ),
    min_size=1,
    max_size=4,
)


def _tasks(data, models):
    out = []
    for model, scores in enumerate(models, start=1):
        cuts = data.draw(
            st.sets(st.integers(1, len(scores) - 1), max_size=3)
            if len(scores) > 1
            else st.just(set())
        )
        bounds = [0, *sorted(cuts), len(scores)]
        for start, stop in zip(bounds, bounds[1:], strict=False):
            out.append(task(len(out) + 1, model, scores[start:stop]))
    return data.draw(st.permutations(out))


@settings(max_examples=60, deadline=None)
@given(models=_MODELS, data=st.data())
def test_a_record_built_from_the_tasks_checks_clean_and_any_change_shows(models, data):
    tasks = _tasks(data, models)
    record = payout(tasks, listed=sorted(t["task"]["id"] for t in tasks))
    record["payout"]["standing"] = [row(m, s) for m, s in enumerate(models, start=1)]
    entries = [*tasks, record]
    assert check_held_out(entries) == ([], 1)
    standing = record["payout"]["standing"]
    which = data.draw(st.integers(0, len(standing) - 1))
    field = data.draw(st.sampled_from(["score", "ci_low", "ci_high"]))
    delta = data.draw(st.floats(1.001e-6, 1)) * data.draw(st.sampled_from([1, -1]))
    standing[which][field] += delta
    problems, _ = check_held_out(entries)
    assert len(problems) == 1
    assert f": entry {standing[which]['entry']}: logged {field} " in problems[0]
