"""Answers to plans from consensus-verified results (the cache of personalized boards).

CONTRACT STUB (issue 16): the cache helper replaces the bodies; the dataclasses and
signatures are what the asks service, the API and the pages use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from quorumbench.core.plans import Plan
from quorumbench.services.context import ServerContext


@dataclass(frozen=True)
class SliceRow:
    """One model's score over the plan's slice of its verified per-sample results."""

    model_id: int
    name: str
    ref: str
    n_samples: int
    score: float
    ci_low: float
    ci_high: float
    chance: float | None
    """Mean chance level of the slice's samples (None: not known)."""
    benchmarks: dict[str, int]
    """Samples per benchmark name in the slice."""
    updated_at: datetime
    """When the newest task in the slice was finalized (freshness)."""
    rank: int
    best: int
    worst: int
    thin: bool
    """Fewer samples than the plan's budget."""


@dataclass(frozen=True)
class CacheAnswer:
    plan_id: str
    rows: list[SliceRow]
    """Ranked (core/ranking.py), best first."""
    benchmarks: list[str] = field(default_factory=list)
    """Benchmarks whose labelled samples the slice covers."""
    label_sets: int = 0
    """How many (benchmark, label combination) cells matched."""


def answer(ctx: ServerContext, session: Session, plan: Plan) -> CacheAnswer:
    """The plan's board from the cache: no sample rows are scanned."""
    raise NotImplementedError("ask_cache: issue 16 helper")
