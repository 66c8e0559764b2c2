"""ORM models of asks (``services/asks.py``): public plans and asks.

Imported by ``db/models.py`` at its end, so they are on ``Base.metadata`` with the rest.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class StoredPlan(Base):
    """A public plan (``core/plans.py``), by its id: the SHA-256 of its canonical JSON.

    Only :meth:`Plan.public` is stored (no endpoints, and a plan never holds a key):
    what ``/v0/plans/{id}`` and the shareable ``/ask`` URL show to anyone.
    """

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    plan: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class Ask(Base):
    """A person's ask (services/asks.py): a plan, answered from the cache, and the live
    evaluation of their own endpoints when they gave some.

    ``endpoints`` holds each endpoint's URL and model name only: the API key lives in
    the memory of the process running the ask and nowhere else. ``results`` holds the
    endpoints' live results, for the owner's answer only (never the shared cache, the
    board or the log). ``status`` is PENDING, STARTED, SUCCESS or FAILURE.
    """

    __tablename__ = "asks"
    __table_args__ = (
        Index("ix_asks_owner_created", "owner_id", "created_at"),
        Index("ix_asks_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    """Random and unguessable (an ask with endpoints is its owner's alone)."""
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id"))
    query: Mapped[str | None] = mapped_column(String(2000))
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """How the planner made the plan (None: a plan was given)."""
    endpoints: Mapped[list[Any]]
    """``[{"url": ..., "model": ...}]``: never a key."""
    n_endpoints: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16))
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(String(2000))
    results: Mapped[list[Any] | None] = mapped_column(JSON)
    deepen: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
