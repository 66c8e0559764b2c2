"""Taxonomy v1: the labels every sample carries, and the five pillars.

Labels follow BenchHub's vocabulary, cleaned (DESIGN.md, "Labels and pillars"):

* ``skill``: one of :data:`SKILLS`;
* ``subject``: ``coarse`` or ``coarse/fine``, coarse one of :data:`SUBJECT_COARSE`,
  fine a lowercase kebab-case word listed per benchmark (``science/math``);
* ``target``: ``general`` or ``local/<ISO 3166 alpha-2 code, lowercase>``;
* ``format``: one of :data:`FORMATS`;
* ``language``: an ISO 639-1 code (two lowercase letters).

A source dataset's own category is kept apart as ``source_category`` (free text).
Each benchmark belongs to one pillar; the aggregate weights pillars by
:data:`SEED_PILLAR_WEIGHTS` (seed 002's weights, which sum to 1.10 there and are
normalised by :func:`normalised_weights`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

TAXONOMY_VERSION = 1
SKILLS = ("knowledge", "reasoning", "value", "alignment")
SUBJECT_COARSE = ("science", "tech", "hass", "culture", "social-intelligence", "art-sports")
FORMATS = ("binary", "mcqa", "short-form", "open-ended", "code")
LABEL_KEYS = ("skill", "subject", "target", "format", "language")

PILLARS = ("reasoning", "coding", "math", "language", "safety")
SEED_PILLAR_WEIGHTS: Mapping[str, float] = {
    "reasoning": 0.35,
    "coding": 0.20,
    "math": 0.15,
    "language": 0.20,
    "safety": 0.20,
}
"""Seed 002's weights as written (they sum to 1.10; the aggregate normalises them)."""

_FINE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_TARGET = re.compile(r"^(?:general|local/[a-z]{2})$")
_LANGUAGE = re.compile(r"^[a-z]{2}$")


def label_problems(labels: Mapping[str, str | None]) -> list[str]:
    """What is wrong with one sample's labels under taxonomy v1 (empty: nothing)."""
    problems = [f"missing label {key!r}" for key in LABEL_KEYS if not labels.get(key)]
    skill, subject = labels.get("skill"), labels.get("subject")
    if skill and skill not in SKILLS:
        problems.append(f"skill {skill!r} is not one of {', '.join(SKILLS)}")
    if subject:
        coarse, _, fine = subject.partition("/")
        if coarse not in SUBJECT_COARSE:
            problems.append(
                f"subject {subject!r} does not start with one of {', '.join(SUBJECT_COARSE)}"
            )
        elif "/" in subject and not _FINE.fullmatch(fine):
            problems.append(f"subject {subject!r}: the part after '/' is one kebab-case word")
    target, fmt, language = labels.get("target"), labels.get("format"), labels.get("language")
    if target and not _TARGET.fullmatch(target):
        problems.append(f"target {target!r} is not 'general' or 'local/<country code>'")
    if fmt and fmt not in FORMATS:
        problems.append(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if language and not _LANGUAGE.fullmatch(language):
        problems.append(f"language {language!r} is not an ISO 639-1 code such as 'en'")
    unknown = sorted(set(labels) - {*LABEL_KEYS, "source_category"})
    problems += [f"unknown label {key!r}" for key in unknown]
    return problems


def pillar_problem(pillar: str) -> str | None:
    """Why ``pillar`` is not a pillar (None when it is one)."""
    if pillar in PILLARS:
        return None
    return f"pillar {pillar!r} is not one of {', '.join(PILLARS)}"


def normalised_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Pillar weights scaled to sum to 1, in :data:`PILLARS` order.

    Every pillar needs a finite weight >= 0 and at least one must be positive; a
    missing pillar or an unknown name is a ``ValueError``.
    """
    unknown = sorted(set(weights) - set(PILLARS))
    if unknown:
        raise ValueError(f"unknown pillars: {', '.join(unknown)}")
    missing = [p for p in PILLARS if p not in weights]
    if missing:
        raise ValueError(f"no weight for pillars: {', '.join(missing)}")
    bad = [p for p in PILLARS if not (math.isfinite(weights[p]) and weights[p] >= 0)]
    if bad:
        raise ValueError(f"pillar weights must be finite and >= 0: {', '.join(bad)}")
    total = math.fsum(weights[p] for p in PILLARS)
    if total <= 0:
        raise ValueError("at least one pillar weight must be positive")
    return {p: weights[p] / total for p in PILLARS}
