"""The lexicon covers every label value in English and Korean, and each of its phrases,
read as a query, maps to what the lexicon says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import quorumbench.benchmarks as benchmarks_pkg
from quorumbench.benchmarks import DEFAULT_PILLARS, mmlu, truthfulqa
from quorumbench.core.plans import parse_plan
from quorumbench.core.taxonomy import FORMATS, PILLARS, SKILLS, SUBJECT_COARSE
from quorumbench.planner import CatalogEntry, lexicon, plan_query
from quorumbench.planner.text import EN_STOP, KO_STOP, has_hangul, key_of

CATALOG = [CatalogEntry(name, 1, pillar) for name, pillar in DEFAULT_PILLARS.items()]


def builtin_fine_subjects() -> set[str]:
    """Every fine subject a built-in benchmark labels its samples with."""
    found = {*mmlu.SUBJECTS.values(), *truthfulqa.SUBJECTS.values(), "culture/other"}
    for path in Path(benchmarks_pkg.__file__).parent.glob("*.py"):
        found |= set(re.findall(r'subject="([a-z-]+/[a-z0-9-]+)"', path.read_text("utf-8")))
    return found


def test_the_builtin_subject_scan_finds_the_inline_labels():
    assert {
        "culture/daily-life",
        "social-intelligence/safety",
        "tech/coding",
    } <= builtin_fine_subjects()


@pytest.mark.parametrize(
    ("table", "values"),
    [
        (lexicon.SKILL_WORDS, SKILLS),
        (lexicon.FORMAT_WORDS, FORMATS),
        (lexicon.PILLAR_WORDS, PILLARS),
        (lexicon.SUBJECT_WORDS, SUBJECT_COARSE),
        (lexicon.SUBJECT_WORDS, tuple(sorted(builtin_fine_subjects()))),
        (lexicon.LANGUAGE_WORDS, ("en", "ko", "ja", "zh")),
        (lexicon.TARGET_WORDS, ("general", "local/kr", "local/us", "local/jp", "local/cn")),
    ],
)
def test_every_value_has_english_and_korean_words(table, values):
    for value in values:
        assert value in table, value
        assert table[value].en, f"{value}: no English words"
        assert table[value].ko, f"{value}: no Korean words"
        assert all(not has_hangul(p) for p in table[value].en), value
        assert all(has_hangul(p) or p.isascii() for p in table[value].ko), value


def test_every_builtin_benchmark_has_words():
    assert set(lexicon.BENCHMARK_WORDS) == set(benchmarks_pkg._BUILTINS)


def test_every_value_is_valid_in_a_plan():
    for senses, _ in lexicon.entries():
        for key, value in senses:
            if key in ("skill", "subject", "target", "format", "language"):
                parse_plan({"labels": {key: [value]}})
            elif key == "pillar":
                parse_plan({"pillars": [value]})
            elif key == "benchmark":
                parse_plan({"benchmarks": [value]})
            else:
                bound, _, number = value.partition(":")
                assert bound in ("kind", "min_params", "max_params") and number


def test_no_phrase_is_a_stop_word():
    phrases = {key_of(p) for _, words in lexicon.entries() for p in (*words.en, *words.ko)}
    assert not phrases & (EN_STOP | KO_STOP)


def _phrases():
    for senses, words in lexicon.entries():
        for phrase in (*words.en, *words.ko):
            yield pytest.param(phrase, senses, id=f"{phrase}->{senses[0][1]}")


@pytest.mark.parametrize(("phrase", "senses"), list(_phrases()))
def test_each_phrase_read_alone_maps_to_its_senses(phrase, senses):
    report = plan_query(phrase, CATALOG)
    got = {(m.key, m.value) for m in report.matches}
    assert set(senses) <= got
    assert all(m.how == "lexicon" and m.confidence == 1.0 for m in report.matches)
    assert report.unmapped == ()
