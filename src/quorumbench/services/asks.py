"""Personalized leaderboards: asks (a query or a plan, maybe the person's own
endpoints), answered from the cache first and by live evaluation when asked.

CONTRACT STUB (issue 16): the asks helper replaces the bodies; the names below are
what the API, the CLI's server calls and the pages use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import SecretStr

from quorumbench.core.plans import Plan
from quorumbench.planner import PlannerReport
from quorumbench.services.ask_cache import CacheAnswer
from quorumbench.services.context import ServerContext


class AskStatus(StrEnum):
    PENDING = "PENDING"
    STARTED = "STARTED"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


@dataclass(frozen=True)
class EndpointRequest:
    """A person's endpoint as their request gives it; the key lives only in memory."""

    url: str
    model: str
    api_key: SecretStr | None = None


@dataclass(frozen=True)
class EndpointRow:
    """One user endpoint's live result: one evaluation, not cross-checked."""

    url: str
    model: str
    status: AskStatus
    n_samples: int
    score: float | None
    ci_low: float | None
    ci_high: float | None
    benchmarks: dict[str, int]
    error: str | None = None


@dataclass(frozen=True)
class AskView:
    id: str
    status: AskStatus
    plan: Plan
    plan_id: str
    report: PlannerReport | None
    """How the query became the plan (None when a plan was given)."""
    progress_done: int
    progress_total: int
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    owner_id: int | None
    deepen: Mapping[str, Any] | None = None
    """Deepening of thin slices for public models (services/deepen.py), if asked."""


@dataclass(frozen=True)
class AskBoard:
    ask: AskView
    cache: CacheAnswer
    endpoints: list[EndpointRow] = field(default_factory=list)


def preview(ctx: ServerContext, query: str) -> PlannerReport:
    """The plan the planner makes of ``query`` (nothing stored, nothing run)."""
    raise NotImplementedError("asks: issue 16 helper")


def create(
    ctx: ServerContext,
    *,
    owner_id: int | None,
    query: str | None = None,
    plan: Mapping[str, Any] | None = None,
    endpoints: Sequence[EndpointRequest] = (),
    deepen: bool = False,
) -> AskView:
    """Store an ask (and its public plan), answer from the cache, start live work."""
    raise NotImplementedError("asks: issue 16 helper")


def view(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> AskView:
    raise NotImplementedError("asks: issue 16 helper")


def board(ctx: ServerContext, ask_id: str, viewer_id: int | None) -> AskBoard:
    raise NotImplementedError("asks: issue 16 helper")


def plan_board(ctx: ServerContext, plan_id: str) -> tuple[Plan, CacheAnswer]:
    """A stored public plan (by id, the shareable URL) and its cache answer."""
    raise NotImplementedError("asks: issue 16 helper")
