import pytest

from quorumbench.core.consensus import (
    DEFAULT_TOLERANCE,
    SAMPLE_EPSILON,
    Vote,
    canary_passes,
    differing_samples,
    per_sample,
    quorum_verdict,
    verdict_from_dict,
    within_tolerance,
)
from quorumbench.settings import ServerSettings


def vote(result_id, *samples):
    """A vote whose score is the mean of its per-sample scores (as the server checks)."""
    return Vote(result_id, sum(samples) / len(samples), tuple(float(x) for x in samples))


def score_only(*scores):
    """Votes without per-sample scores: compared by their task scores alone."""
    return [Vote(i + 1, s, ()) for i, s in enumerate(scores)]


def test_identical_runners_agree_and_the_score_is_the_consensus_mean():
    verdict = quorum_verdict([vote(i, 1, 0, 1, 1, 0) for i in (1, 2, 3)])
    assert verdict.status == "DONE"
    assert verdict.agreeing == (1, 2, 3) and verdict.outliers == ()
    assert verdict.sample_consensus == (1.0, 0.0, 1.0, 1.0, 0.0)
    assert verdict.sample_agreement == (1.0,) * 5
    assert verdict.score == 0.6
    assert (verdict.tolerance, verdict.epsilon) == (DEFAULT_TOLERANCE, SAMPLE_EPSILON)


def test_two_wrong_samples_of_five_hide_behind_an_equal_mean_no_more():
    honest = (1, 0, 1, 1, 0)
    cheat = (0, 1, 1, 1, 0)  # two answers flipped, the same mean (0.6)
    first = quorum_verdict([vote(1, *honest), vote(2, *honest), vote(3, *cheat)])
    # Under the score rule alone (spread 0 <= 0.5) this was DONE with all three.
    assert first.status == "DISPUTED" and first.spread == 0.0
    second = quorum_verdict(
        [vote(1, *honest), vote(2, *honest), vote(3, *cheat), vote(4, *honest), vote(5, *honest)],
        quorum=5,
    )
    assert second.status == "DONE"
    assert second.outliers == (3,) and second.agreeing == (1, 2, 4, 5)
    assert second.sample_agreement == (0.8, 0.8, 1.0, 1.0, 1.0)


def test_one_differing_sample_of_five_is_tolerated():
    verdict = quorum_verdict(
        [vote(1, 1, 1, 0, 0, 0), vote(2, 1, 1, 0, 0, 1), vote(3, 0, 1, 0, 0, 0)]
    )
    assert verdict.status == "DONE" and verdict.agreeing == (1, 2, 3)
    assert verdict.sample_consensus == (1.0, 1.0, 0.0, 0.0, 0.0)
    assert verdict.score == pytest.approx(0.4)


def test_the_score_is_the_mean_of_the_consensus_vector_not_a_median_score():
    # each runner is wrong on a different sample: every task score is 0.6, yet the
    # per-sample majority (what the leaderboard keeps) is 0.4
    votes = [vote(1, 1, 1, 1, 0, 0), vote(2, 1, 1, 0, 1, 0), vote(3, 1, 1, 0, 0, 1)]
    verdict = quorum_verdict(votes)
    assert verdict.status == "DONE"
    assert verdict.sample_consensus == (1.0, 1.0, 0.0, 0.0, 0.0)
    assert verdict.score == pytest.approx(0.4)


def test_the_score_spread_stays_an_outer_gate():
    votes = [vote(1, 1, 1, 0, 0, 0), vote(2, 1, 1, 0, 0, 0), vote(3, 1, 1, 1, 0, 0)]
    assert quorum_verdict(votes).status == "DONE"  # all within one sample of consensus
    narrow = quorum_verdict(votes, threshold=0.1)  # but 0.4 vs 0.6 is more than 0.1 apart
    assert narrow.status == "DISPUTED" and narrow.spread == pytest.approx(0.2)


def test_tolerance_is_a_share_of_the_samples():
    truth = [1.0] * 10
    two = [0.0, 0.0] + truth[2:]
    three = [0.0, 0.0, 0.0] + truth[3:]
    assert differing_samples(two, truth) == 2
    assert within_tolerance(two, truth, 0.2)  # 2 of 10
    assert not within_tolerance(three, truth, 0.2)
    assert within_tolerance([0.0, 1.0, 1.0, 1.0, 1.0], [1.0] * 5, 0.2)  # 1 of 5
    assert not within_tolerance([0.0, 0.0, 1.0, 1.0, 1.0], [1.0] * 5, 0.2)
    assert not within_tolerance([0.0, 1.0, 1.0], [1.0] * 3, 0.2)  # 1 of 3 is a third
    assert within_tolerance([0.0, 1.0, 1.0], [1.0] * 3, 0.0) is False
    assert within_tolerance([1.0], [1.0], 0.0)
    assert not within_tolerance([1.0], [1.0, 1.0], 1.0)  # not the same samples
    assert not within_tolerance([], [], 1.0)
    with pytest.raises(ValueError):
        differing_samples([1.0], [1.0, 0.0])


def test_fractional_scores_differ_only_beyond_epsilon():
    mc2 = (0.31, 0.72, 0.05)
    close = (0.3101, 0.7151, 0.05)  # within 0.01 on every sample
    far = (0.41, 0.72, 0.05)
    assert differing_samples(close, mc2) == 0
    assert differing_samples(far, mc2) == 1
    assert differing_samples(far, mc2, epsilon=0.2) == 0
    votes = [Vote(1, 0.36, mc2), Vote(2, 0.3584, close), Vote(3, 0.39, far)]
    verdict = quorum_verdict(votes, min_agree=2)
    assert verdict.sample_consensus == (0.3101, 0.72, 0.05)  # the medians
    assert verdict.status == "DONE" and verdict.outliers == (3,)  # 1 of 3 is over 0.2
    assert verdict.score == pytest.approx((0.3101 + 0.72 + 0.05) / 3)
    assert quorum_verdict(votes, epsilon=0.2).outliers == ()


def test_a_tie_between_zeros_and_ones_is_a_sample_nobody_matches():
    consensus, agreement = per_sample([vote(1, 1, 1), vote(2, 1, 0), vote(3, 1, 1), vote(4, 1, 0)])
    assert consensus == (1.0, 0.5) and agreement == (1.0, 0.0)


def test_per_sample_consensus_and_agreement():
    verdict = quorum_verdict([vote(1, 1, 0), vote(2, 1, 0), vote(3, 1, 1)], min_agree=2)
    assert verdict.sample_consensus == (1.0, 0.0)
    assert verdict.sample_agreement == (1.0, pytest.approx(2 / 3))
    assert verdict.status == "DONE" and verdict.outliers == (3,)  # 1 of 2 is over 0.2


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
def test_without_per_sample_scores_the_first_round_is_max_minus_min(scores, status, score):
    verdict = quorum_verdict(score_only(*scores))
    assert verdict.status == status
    assert verdict.score == score
    assert verdict.tolerance is None and verdict.sample_consensus == ()


def test_without_per_sample_scores_a_larger_quorum_outvotes_an_outlier():
    verdict = quorum_verdict(score_only(0.1, 0.2, 0.9, 0.15, 0.2), quorum=5, threshold=0.2)
    assert verdict.status == "DONE"
    assert verdict.score == 0.175
    assert verdict.outliers == (3,)
    assert verdict.agreeing == (1, 2, 4, 5)
    split = quorum_verdict(score_only(0.0, 0.0, 1.0, 1.0, 0.5), quorum=5, threshold=0.1)
    assert split.status == "DISPUTED"


def test_mismatched_sample_counts_fall_back_to_scores():
    verdict = quorum_verdict([Vote(1, 0.5, (1.0,)), Vote(2, 0.5, (1.0, 0.0)), Vote(3, 0.5, ())])
    assert verdict.sample_consensus == () and verdict.tolerance is None
    assert verdict.status == "DONE" and verdict.score == 0.5


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quorum": 0},
        {"min_agree": 0},
        {"threshold": -0.1},
        {"tolerance": -0.1},
        {"tolerance": 1.1},
        {"epsilon": -0.01},
        {"epsilon": 0.5},
    ],
)
def test_bad_rules(kwargs):
    with pytest.raises(ValueError):
        quorum_verdict([vote(i, 1) for i in (1, 2, 3)], **kwargs)


def test_duplicate_result_ids():
    with pytest.raises(ValueError):
        quorum_verdict([vote(1, 1), vote(1, 1), vote(2, 1)])


def test_the_default_tolerance_is_the_server_default():
    assert ServerSettings(_env_file=None).sample_tolerance == DEFAULT_TOLERANCE


def test_a_canary_passes_when_it_would_have_joined_the_agreeing_cluster():
    # verdicts reached by scores alone (no tolerance): the score rule only
    assert canary_passes([0.5, 0.75, 0.5], 0.5, threshold=0.5)
    assert canary_passes([0.5, 0.75, 0.5], 0.25, threshold=0.5)  # spread 0.5: on the edge
    assert not canary_passes([0.5, 0.75, 0.5], 0.0, threshold=0.5)
    assert not canary_passes([0.5, 0.5, 0.5], 0.8, threshold=0.2)
    assert canary_passes([0.5], 0.5, threshold=0.0)
    with pytest.raises(ValueError):
        canary_passes([], 0.5)


def test_a_canary_must_also_match_the_settled_consensus_sample_by_sample():
    settled = (1.0, 0.0, 1.0, 1.0, 0.0)
    rule = {"sample_consensus": settled, "tolerance": 0.2, "epsilon": SAMPLE_EPSILON}
    assert canary_passes([0.6] * 3, 0.6, 0.5, sample_scores=settled, **rule)
    one_off = (1.0, 0.0, 1.0, 1.0, 1.0)
    assert canary_passes([0.6] * 3, 0.8, 0.5, sample_scores=one_off, **rule)
    two_off = (0.0, 1.0, 1.0, 1.0, 0.0)  # the same mean, two answers flipped
    assert not canary_passes([0.6] * 3, 0.6, 0.5, sample_scores=two_off, **rule)
    # the score gate still applies on top
    assert not canary_passes([0.6] * 3, 0.8, 0.1, sample_scores=one_off, **rule)
    # a per-sample verdict needs the canary's per-sample scores
    assert not canary_passes([0.6] * 3, 0.6, 0.5, sample_scores=(), **rule)
    # no epsilon logged: the default one
    no_eps = {**rule, "epsilon": None}
    assert canary_passes([0.6] * 3, 0.6, 0.5, sample_scores=settled, **no_eps)


def test_a_verdict_survives_its_dict_form():
    votes = [vote(1, 1, 0), vote(2, 1, 0), vote(3, 1, 1)]
    verdict = quorum_verdict(votes, quorum=3, min_agree=2, threshold=0.2)
    assert verdict.as_dict()["tolerance"] == DEFAULT_TOLERANCE
    assert verdict_from_dict(verdict.as_dict()) == verdict


def test_a_verdict_stored_before_the_per_sample_rule_reads_without_a_tolerance():
    old = quorum_verdict(score_only(0.5, 0.5, 0.5)).as_dict()
    del old["tolerance"], old["epsilon"]
    verdict = verdict_from_dict(old)
    assert verdict.status == "DONE" and verdict.tolerance is None and verdict.epsilon is None
