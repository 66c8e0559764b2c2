import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumbench.core.consensus import Vote, quorum_verdict


def votes(*scores, samples=None):
    return [Vote(i + 1, s, tuple(samples[i]) if samples else (s,)) for i, s in enumerate(scores)]


@pytest.mark.parametrize(
    ("scores", "status", "score"),
    [
        ((0.4, 0.6, 0.5), "DONE", 0.5),
        ((0.0, 0.5, 0.25), "DONE", 0.25),  # max - min == threshold is agreement
        ((0.0, 0.6, 0.3), "DISPUTED", None),
        ((1.0, 1.0), "PENDING", None),
        ((0.2, 0.2, 0.2), "DONE", 0.2),
    ],
)
def test_first_round_is_max_minus_min(scores, status, score):
    verdict = quorum_verdict(votes(*scores))
    assert verdict.status == status
    assert verdict.score == score


def test_two_of_three_agree_is_disputed_in_the_first_round():
    assert quorum_verdict(votes(0.1, 0.2, 0.9), threshold=0.2).status == "DISPUTED"


def test_a_larger_quorum_outvotes_an_outlier():
    verdict = quorum_verdict(votes(0.1, 0.2, 0.9, 0.15, 0.2), quorum=5, threshold=0.2)
    assert verdict.status == "DONE"
    assert verdict.score == 0.175
    assert verdict.outliers == (3,)
    assert verdict.agreeing == (1, 2, 4, 5)


def test_a_split_larger_quorum_stays_disputed():
    verdict = quorum_verdict(votes(0.0, 0.0, 1.0, 1.0, 0.5), quorum=5, threshold=0.1)
    assert verdict.status == "DISPUTED"


def test_per_sample_consensus_and_agreement():
    verdict = quorum_verdict(votes(0.5, 0.5, 1.0, samples=[(1, 0), (1, 0), (1, 1)]), threshold=0.5)
    assert verdict.sample_consensus == (1.0, 0.0)
    assert verdict.sample_agreement == (1.0, pytest.approx(2 / 3))


def test_mismatched_sample_counts_give_no_per_sample_data():
    verdict = quorum_verdict([Vote(1, 0.5, (1.0,)), Vote(2, 0.5, (1.0, 0.0)), Vote(3, 0.5, ())])
    assert verdict.sample_consensus == ()


@pytest.mark.parametrize("kwargs", [{"quorum": 0}, {"min_agree": 0}, {"threshold": -0.1}])
def test_bad_rules(kwargs):
    with pytest.raises(ValueError):
        quorum_verdict(votes(0.5, 0.5, 0.5), **kwargs)


def test_duplicate_result_ids():
    with pytest.raises(ValueError):
        quorum_verdict([Vote(1, 0.5, ()), Vote(1, 0.5, ()), Vote(2, 0.5, ())])


score = st.floats(min_value=0, max_value=1, allow_nan=False)


@given(st.lists(score, min_size=3, max_size=9), st.floats(min_value=0, max_value=1), st.randoms())
def test_reordering_runners_never_changes_the_verdict(scores, threshold, rnd):
    vs = votes(*scores)
    shuffled = list(vs)
    rnd.shuffle(shuffled)
    a = quorum_verdict(vs, quorum=3, threshold=threshold)
    b = quorum_verdict(shuffled, quorum=3, threshold=threshold)
    assert (a.status, a.score, a.agreeing, a.outliers) == (
        b.status,
        b.score,
        b.agreeing,
        b.outliers,
    )


@given(st.lists(score, min_size=3, max_size=8), st.floats(min_value=0, max_value=1), st.data())
def test_adding_an_honest_runner_never_flips_done(scores, threshold, data):
    before = quorum_verdict(votes(*scores), threshold=threshold)
    if before.status != "DONE":
        return
    inside = [s for i, s in enumerate(scores, start=1) if i in before.agreeing]
    honest = data.draw(st.floats(min_value=min(inside), max_value=max(inside)))
    after = quorum_verdict(votes(*scores, honest), quorum=len(scores) + 1, threshold=threshold)
    assert after.status == "DONE"


@given(st.lists(score, min_size=3, max_size=9), st.floats(min_value=0, max_value=1))
def test_done_score_lies_within_the_agreeing_scores(scores, threshold):
    verdict = quorum_verdict(votes(*scores), threshold=threshold)
    if verdict.status == "DONE":
        inside = [s for i, s in enumerate(scores, start=1) if i in verdict.agreeing]
        assert min(inside) <= verdict.score <= max(inside)
        assert max(inside) - min(inside) <= threshold + 1e-9


def test_a_canary_passes_when_it_would_have_joined_the_agreeing_cluster():
    from quorumbench.core.consensus import canary_passes

    assert canary_passes([0.5, 0.75, 0.5], 0.5, threshold=0.5)
    assert canary_passes([0.5, 0.75, 0.5], 0.25, threshold=0.5)  # spread 0.5: on the edge
    assert not canary_passes([0.5, 0.75, 0.5], 0.0, threshold=0.5)
    assert not canary_passes([0.5, 0.5, 0.5], 0.8, threshold=0.2)
    assert canary_passes([0.5], 0.5, threshold=0.0)
    with pytest.raises(ValueError):
        canary_passes([], 0.5)


def test_a_verdict_survives_its_dict_form():
    from quorumbench.core.consensus import verdict_from_dict

    votes = [Vote(1, 0.5, (1.0, 0.0)), Vote(2, 0.5, (1.0, 0.0)), Vote(3, 1.0, (1.0, 1.0))]
    verdict = quorum_verdict(votes, quorum=3, min_agree=2, threshold=0.2)
    assert verdict_from_dict(verdict.as_dict()) == verdict
