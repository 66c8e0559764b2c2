"""Taxonomy v1: label vocabulary and pillar weights."""

import math

import pytest

from quorumbench.core.taxonomy import (
    PILLARS,
    SEED_PILLAR_WEIGHTS,
    label_problems,
    normalised_weights,
    pillar_problem,
)

GOOD = {
    "skill": "reasoning",
    "subject": "science/math",
    "target": "general",
    "format": "short-form",
    "language": "en",
}


def test_good_labels_have_no_problems():
    assert label_problems(GOOD) == []
    assert label_problems({**GOOD, "subject": "hass", "target": "local/kr"}) == []
    assert label_problems({**GOOD, "source_category": "Misconceptions: Topical"}) == []


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"skill": "arithmetic"}, "skill 'arithmetic'"),
        ({"subject": "math"}, "does not start with"),
        ({"subject": "science/Math Stuff"}, "kebab-case"),
        ({"target": "korea"}, "target 'korea'"),
        ({"target": "local/kor"}, "target 'local/kor'"),
        ({"format": "multiple-choice"}, "format 'multiple-choice'"),
        ({"language": "eng"}, "ISO 639-1"),
        ({"colour": "red"}, "unknown label 'colour'"),
        ({"skill": ""}, "missing label 'skill'"),
    ],
)
def test_bad_labels_are_named(change, fragment):
    problems = label_problems({**GOOD, **change})
    assert any(fragment in p for p in problems), problems


def test_pillars():
    assert pillar_problem("coding") is None
    assert "not one of" in (pillar_problem("vibes") or "")


def test_seed_weights_are_normalised_and_say_so():
    assert math.isclose(math.fsum(SEED_PILLAR_WEIGHTS.values()), 1.10)
    weights = normalised_weights(SEED_PILLAR_WEIGHTS)
    assert list(weights) == list(PILLARS)
    assert math.isclose(math.fsum(weights.values()), 1.0)
    assert math.isclose(weights["reasoning"], 0.35 / 1.10)
    assert math.isclose(weights["math"], 0.15 / 1.10)


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ({**SEED_PILLAR_WEIGHTS, "edge": 0.1}, "unknown pillars: edge"),
        ({p: 1.0 for p in PILLARS if p != "safety"}, "no weight for pillars: safety"),
        ({**SEED_PILLAR_WEIGHTS, "math": -1.0}, "finite and >= 0: math"),
        ({**SEED_PILLAR_WEIGHTS, "math": math.nan}, "finite and >= 0: math"),
        (dict.fromkeys(PILLARS, 0.0), "at least one"),
    ],
)
def test_bad_weights_are_refused(weights, fragment):
    with pytest.raises(ValueError, match=fragment):
        normalised_weights(weights)


def test_a_trailing_newline_is_not_a_valid_label() -> None:
    problems = label_problems(
        {**GOOD, "subject": "science/math\n", "target": "local/kr\n", "language": "ko\n"}
    )
    assert len(problems) == 3
