"""services/interval_batch.py: many intervals at once equal core/intervals.score_interval."""

from __future__ import annotations

import random

import pytest

from quorumbench.core.intervals import score_interval
from quorumbench.services import interval_batch
from quorumbench.services.interval_batch import score_intervals


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    interval_batch.forget()


def test_batch_equals_the_pure_interval_on_edges_and_fractions() -> None:
    rng = random.Random(7)
    pairs: list[tuple[float, int]] = [(0.0, 1), (1.0, 1), (0.0, 8), (8.0, 8), (0.5, 1)]
    pairs += [(3.0, 10), (7.25, 10), (1e-9, 5), (5 - 1e-9, 5), (-0.5, 4), (4.5, 4)]
    for _ in range(400):
        n = rng.choice([1, 2, 5, 40, 200, 1000, 50_000])
        total = rng.choice([float(rng.randint(0, n)), rng.random() * n])
        pairs.append((total, n))
    got = score_intervals([t for t, _ in pairs], [n for _, n in pairs])
    for (total, n), (low, high) in zip(pairs, got, strict=True):
        want_low, want_high = score_interval(total, n)
        assert low == pytest.approx(want_low, abs=1e-12), (total, n)
        assert high == pytest.approx(want_high, abs=1e-12), (total, n)
        mean = min(max(total, 0.0), n) / n
        assert low <= mean <= high


def test_the_memo_answers_repeats_and_keeps_the_order() -> None:
    first = score_intervals([3.0, 7.5, 3.0], [10, 10, 10])
    assert first[0] == first[2] and first[0] != first[1]
    again = score_intervals([7.5, 3.0], [10, 10])  # from the memo: the same values
    assert again == [first[1], first[0]]
    assert score_intervals([], []) == []


def test_the_memo_starts_afresh_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interval_batch, "KEPT", 3)
    score_intervals([1.0, 2.0], [10, 10])
    score_intervals([3.0, 4.0], [10, 10])  # 2 + 2 > 3: emptied first
    assert set(interval_batch._memo) == {(3.0, 10), (4.0, 10)}
    assert score_intervals([1.0], [10])[0] == pytest.approx(score_interval(1.0, 10), abs=1e-12)


def test_no_samples_has_no_interval() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        score_intervals([0.0], [0])
