"""Deepening a plan's thin slice: extra verified tasks for public models.

CONTRACT STUB (issue 16): the deepen helper replaces the bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.core.plans import Plan
from quorumbench.services.context import ServerContext


def request(ctx: ServerContext, plan: Plan, owner_id: int) -> Mapping[str, Any]:
    """Schedule extra tasks on exactly the plan's labelled samples for the plan's thin
    public models (through the runner queue and consensus); what was scheduled."""
    raise NotImplementedError("deepen: issue 16 helper")


def progress(ctx: ServerContext, plan_id: str) -> Mapping[str, Any]:
    """How far the plan's deepening tasks are (scheduled, done, disputed, pending)."""
    raise NotImplementedError("deepen: issue 16 helper")
