"""Turning a plain-language question into a plan (``core/plans.py``), saying how.

:func:`plan_query` is the entry point. The offline planner (``offline.py``: lexicon,
sizes, language identification, fuzzy matching) is the default and is deterministic;
the LLM planner (``llm.py``) is used when the operator configures an OpenAI-compatible
endpoint, and any failure of it falls back to the offline planner with the reason in
:attr:`PlannerReport.fallback`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from quorumbench.core.plans import Plan


@dataclass(frozen=True)
class CatalogEntry:
    """A benchmark the server runs: what a plan may name and version."""

    name: str
    version: int
    pillar: str | None


@dataclass(frozen=True)
class Match:
    """One word (or phrase) of the query and the label value it mapped to."""

    text: str
    key: str
    """A label key (``skill``, ``subject``, ``target``, ``format``, ``language``), or
    ``pillar``, ``benchmark``, ``models`` (size/type words)."""
    value: str
    confidence: float
    """In [0, 1]: 1 for an exact lexicon entry, lower for fuzzy or embedding matches."""
    how: str
    """``lexicon``, ``fuzzy``, ``embedding`` or ``llm``."""


@dataclass(frozen=True)
class PlannerSettings:
    """The optional LLM planner: any OpenAI-compatible endpoint the operator sets."""

    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer``; left out of ``repr`` so that it never shows in
    a log line or a traceback."""
    timeout_s: float = 20.0


@dataclass(frozen=True)
class PlannerReport:
    plan: Plan
    query: str
    language: str | None
    """The query's language (ISO 639-1) as identified, None when unsure."""
    matches: tuple[Match, ...]
    unmapped: tuple[str, ...]
    """Words that carried meaning but mapped to nothing (stop words are not listed)."""
    planner: str
    """``offline/<version>`` or ``llm/<version>``: which planner made the plan."""
    fallback: str | None = None
    """Why the LLM planner was not used although configured (None: it was, or none is
    configured). Shown to the person; never a silent fallback."""


def plan_query(
    query: str,
    catalog: Sequence[CatalogEntry],
    settings: PlannerSettings | None = None,
    *,
    budget: int | None = None,
    seed: str | None = None,
) -> PlannerReport:
    """The plan for ``query`` over the benchmarks in ``catalog``.

    The offline planner by default; the LLM planner when ``settings`` names an
    endpoint and model, falling back to the offline planner (and saying why in
    :attr:`PlannerReport.fallback`) on any failure. ``budget`` and ``seed`` go into the
    plan as given (a bad one is a :class:`~quorumbench.core.plans.PlanError`).
    """
    from quorumbench.planner import llm, offline

    if settings is not None and settings.llm_url and settings.llm_model:
        return llm.plan(query, catalog, settings, budget=budget, seed=seed)
    return offline.plan(query, catalog, budget=budget, seed=seed)
