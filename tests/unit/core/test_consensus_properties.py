"""Properties of the consensus rule, checked with Hypothesis over many vote sets.

Votes carry per-sample scores: 0/1 (exact match, MC1) or fractions (MC2's
probability mass); a vote's task score is the mean of its samples, as the server
checks on every submission.
"""

from __future__ import annotations

import math

from hypothesis import event, given
from hypothesis import strategies as st

from quorumbench.core.consensus import (
    DEFAULT_TOLERANCE,
    SAMPLE_EPSILON,
    Vote,
    quorum_verdict,
    within_tolerance,
)


def vote(result_id: int, samples: tuple[float, ...]) -> Vote:
    return Vote(result_id, math.fsum(samples) / len(samples), samples)


binary = st.sampled_from((0.0, 1.0))
fraction = st.floats(min_value=0, max_value=1, allow_nan=False)


@st.composite
def vote_sets(
    draw: st.DrawFn, min_votes: int = 1, max_votes: int = 9, max_flips: int | None = None
) -> list[Vote]:
    """Votes on one task: 0/1 or fractional samples, copied from one to three base
    vectors with up to ``max_flips`` samples (all by default) redrawn."""
    n = draw(st.integers(1, 8))
    value = draw(st.sampled_from((binary, fraction)))
    base = draw(st.lists(st.tuples(*[value] * n), min_size=1, max_size=3))
    count = draw(st.integers(min_votes, max_votes))
    vectors = []
    for _ in range(count):
        start = draw(st.sampled_from(base))
        flips = draw(st.sets(st.integers(0, n - 1), max_size=n if max_flips is None else max_flips))
        vectors.append(tuple(draw(value) if j in flips else x for j, x in enumerate(start)))
    ids = draw(st.lists(st.integers(1, 10**6), min_size=count, max_size=count, unique=True))
    return [vote(i, v) for i, v in zip(ids, vectors, strict=True)]


rules = st.fixed_dictionaries(
    {
        "threshold": st.floats(min_value=0, max_value=1),
        "tolerance": st.floats(min_value=0, max_value=1),
        "min_agree": st.integers(1, 4),
    }
)


@given(vote_sets(), rules, st.randoms(use_true_random=False), st.integers(1, 5))
def test_reordering_runners_never_changes_the_verdict(votes, rule, rnd, quorum):
    shuffled = list(votes)
    rnd.shuffle(shuffled)
    assert quorum_verdict(votes, quorum=quorum, **rule) == quorum_verdict(
        shuffled, quorum=quorum, **rule
    )


@given(vote_sets(min_votes=3), rules)
def test_a_done_verdict_is_a_quorum_of_agreeing_majority_results(votes, rule):
    verdict = quorum_verdict(votes, quorum=len(votes), **rule)
    if verdict.status != "DONE":
        return
    assert verdict.score is not None
    agreeing = [v for v in votes if v.result_id in verdict.agreeing]
    assert len(agreeing) >= rule["min_agree"] and 2 * len(agreeing) > len(votes)
    assert set(verdict.agreeing) | set(verdict.outliers) == {v.result_id for v in votes}
    for v in agreeing:
        assert within_tolerance(v.sample_scores, verdict.sample_consensus, rule["tolerance"])
    spread = max(v.score for v in agreeing) - min(v.score for v in agreeing)
    assert spread <= rule["threshold"] + 1e-9
    # the task score is the mean of the per-sample consensus the leaderboard keeps
    assert verdict.score == math.fsum(verdict.sample_consensus) / len(verdict.sample_consensus)


@st.composite
def gated_rules(draw: st.DrawFn) -> dict[str, float]:
    tolerance = draw(st.floats(min_value=0, max_value=0.49))
    low = tolerance + SAMPLE_EPSILON + 1e-6
    return {
        "tolerance": tolerance,
        "threshold": draw(st.floats(min_value=low, max_value=1)),
        "min_agree": draw(st.integers(1, 4)),
    }


@given(vote_sets(min_votes=1, max_votes=8, max_flips=2), gated_rules())
def test_an_honest_extra_runner_never_flips_done(votes, rule):
    """An honest runner reproduces the consensus answers; adding it keeps the task DONE.

    (The score gate must not be narrower than what the tolerance lets an agreeing result
    stray from the consensus mean: ``threshold >= tolerance + epsilon``, true of the
    defaults, 0.5 >= 0.2 + 0.01.)
    """
    rule = {**rule, "min_agree": min(rule["min_agree"], len(votes))}
    before = quorum_verdict(votes, quorum=len(votes), **rule)
    event(before.status)
    if before.status != "DONE":
        return
    honest = vote(10**6 + 1, before.sample_consensus)
    after = quorum_verdict([*votes, honest], quorum=len(votes) + 1, **rule)
    assert after.status == "DONE"
    assert honest.result_id in after.agreeing
    assert after.sample_consensus == before.sample_consensus and after.score == before.score


@st.composite
def honest_and_flippers(draw: st.DrawFn, noisy: bool) -> tuple[list[Vote], set[int]]:
    """5-sample truth; honest runners (each, if ``noisy``, wrong on at most one sample,
    never two on the same sample); adversaries copying the truth but flipping k >= 2
    answers each, fewer of them than the honest runners can outvote."""
    truth = draw(st.tuples(*[binary] * 5))
    honest_n = draw(st.integers(4 if noisy else 3, 7))
    noise: list[int | None] = [None] * honest_n
    if noisy:
        positions = draw(st.permutations(range(5)))
        wrong = draw(st.integers(0, min(honest_n, 5)))
        noise[:wrong] = positions[:wrong]
    adversaries = draw(st.integers(1, honest_n - (3 if noisy else 1)))
    vectors = []
    for slip in noise:
        vectors.append(tuple(1.0 - x if j == slip else x for j, x in enumerate(truth)))
    cheats = set()
    for a in range(adversaries):
        if a == 0 or not draw(st.booleans()):
            flipped = draw(st.sets(st.integers(0, 4), min_size=2, max_size=5))
        cheats.add(len(vectors))  # adversaries may collude (the same flips) or not
        vectors.append(tuple(1.0 - x if j in flipped else x for j, x in enumerate(truth)))
    order = draw(st.permutations(range(len(vectors))))
    votes = [vote(i + 1, vectors[k]) for i, k in enumerate(order)]
    return votes, {i + 1 for i, k in enumerate(order) if k in cheats}


@given(honest_and_flippers(noisy=False))
def test_flipping_two_of_five_answers_makes_an_outlier_under_the_defaults(case):
    votes, cheats = case
    verdict = quorum_verdict(votes, quorum=len(votes))
    assert verdict.status == "DONE"
    assert set(verdict.outliers) == cheats
    assert DEFAULT_TOLERANCE * 5 < 2  # the rule these votes were made for


@given(honest_and_flippers(noisy=True))
def test_flippers_are_outliers_even_among_honest_runners_with_one_slip(case):
    votes, cheats = case
    verdict = quorum_verdict(votes, quorum=len(votes))
    assert verdict.status == "DONE"
    assert set(verdict.outliers) == cheats
