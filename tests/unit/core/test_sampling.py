import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.sampling import sample_ids, sample_key

GSM8K_SHA = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
GSM8K_IDS = [f"{i:04d}" for i in range(1319)]


def test_golden_ids_are_stable_across_releases():
    # Changing these breaks every published task: bump SAMPLING_SCHEME instead.
    assert sample_ids("a" * 64, 1, "0", 5, [str(i) for i in range(100)]) == [
        "96",
        "16",
        "25",
        "99",
        "73",
    ]
    assert sample_ids(GSM8K_SHA, 1, "epoch-42", 5, GSM8K_IDS) == [
        "0916",
        "0551",
        "0440",
        "1039",
        "1021",
    ]


def test_key_follows_the_documented_formula():
    material = "qb-sample-v1\0" + GSM8K_SHA + "\0" + "3" + "\0" + "seed" + "\0" + "0007"
    assert sample_key(GSM8K_SHA, 3, "seed", "0007") == hashlib.sha256(material.encode()).hexdigest()


def test_candidate_order_does_not_matter():
    assert sample_ids(GSM8K_SHA, 1, "s", 20, GSM8K_IDS) == sample_ids(
        GSM8K_SHA, 1, "s", 20, list(reversed(GSM8K_IDS))
    )


def test_a_larger_sample_extends_a_smaller_one():
    assert sample_ids(GSM8K_SHA, 1, "s", 30, GSM8K_IDS)[:10] == sample_ids(
        GSM8K_SHA, 1, "s", 10, GSM8K_IDS
    )


@pytest.mark.parametrize(
    "change",
    [
        {"dataset_sha256": "b" * 64},
        {"benchmark_version": 2},
        {"seed": "other"},
    ],
)
def test_every_input_changes_the_draw(change):
    args = {"dataset_sha256": GSM8K_SHA, "benchmark_version": 1, "seed": "s"}
    base = sample_ids(
        args["dataset_sha256"], args["benchmark_version"], args["seed"], 10, GSM8K_IDS
    )
    args.update(change)
    other = sample_ids(
        args["dataset_sha256"], args["benchmark_version"], args["seed"], 10, GSM8K_IDS
    )
    assert base != other


@pytest.mark.parametrize(
    ("n", "ids", "message"),
    [
        (0, ["a"], "positive"),
        (2, ["a"], "only 1 exist"),
        (1, ["a", "a"], "unique"),
    ],
)
def test_bad_arguments_are_rejected(n, ids, message):
    with pytest.raises(ValueError, match=message):
        sample_ids(GSM8K_SHA, 1, "s", n, ids)


@given(
    ids=st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=40),
    seed=st.text(max_size=10),
    data=st.data(),
)
def test_draw_is_a_subset_without_repeats(ids, seed, data):
    n = data.draw(st.integers(min_value=1, max_value=len(ids)))
    drawn = sample_ids(GSM8K_SHA, 1, seed, n, ids)
    assert len(drawn) == n
    assert len(set(drawn)) == n
    assert set(drawn) <= ids


@given(
    ids=st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=40),
    seed=st.text(max_size=10),
    version=st.integers(min_value=0, max_value=10**6),
    data=st.data(),
)
def test_the_draw_is_the_documented_sort_by_key(ids, seed, version, data):
    # sample_ids hashes from a copied prefix state and keeps the n smallest: the same
    # ids, in the same order, as sorting every (sample_key, id) and taking the first n
    n = data.draw(st.integers(min_value=1, max_value=len(ids)))
    keyed = sorted((sample_key(GSM8K_SHA, version, seed, i), i) for i in ids)
    assert sample_ids(GSM8K_SHA, version, seed, n, ids) == [i for _, i in keyed[:n]]
