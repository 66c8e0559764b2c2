"""ORM model of edge results (``services/edge_results.py``).

Imported by ``db/__init__.py``, so it is on ``Base.metadata`` with the rest.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class EdgeResult(Base):
    """One runner's signed figures for one edge task (``protocol.EdgeReport``).

    Hardware data: no score, consensus, reputation or ranking reads it. One per
    (task, account), like results: a task's runners are of distinct accounts."""

    __tablename__ = "edge_results"
    __table_args__ = (UniqueConstraint("task_id", "account_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    lease_id: Mapped[int] = mapped_column(ForeignKey("leases.id"), unique=True)
    runner_id: Mapped[int] = mapped_column(ForeignKey("runners.id"), index=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    hardware_class: Mapped[str] = mapped_column(String(200), index=True)
    """``core.efficiency.hardware_class`` of the report's machine."""
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The report as signed (``EdgeReport.model_dump(mode="json")``)."""
    payload_sha256: Mapped[str] = mapped_column(String(64))
    counted: Mapped[bool] = mapped_column(Boolean, default=True)
    """False for a suspended runner's late report: kept for the record, not shown."""
    submitted_at: Mapped[datetime]
    key_id: Mapped[str | None] = mapped_column(String(64))
    signed_at: Mapped[str | None] = mapped_column(String(40))
    signature: Mapped[str | None] = mapped_column(String(128))
    round: Mapped[int] = mapped_column(Integer, default=1)
