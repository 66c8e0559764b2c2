"""ORM model of the per-task measurement cross-check (``services/measurement_check.py``).

Imported by ``db/__init__.py``, so it is on ``Base.metadata`` with the rest.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class TaskMeasurement(Base):
    """One hardware class's measurements on one DONE task: how many agreeing results of
    that class sent measurements, and per quantity the median and spread (median
    absolute deviation) over those that measured it (None: none did). Written in the
    transaction that finalized the task. Hardware data: no score, consensus or
    reputation reads it."""

    __tablename__ = "task_measurements"
    __table_args__ = (UniqueConstraint("task_id", "hardware_class"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    hardware_class: Mapped[str] = mapped_column(String(200))
    n: Mapped[int] = mapped_column(Integer)
    """Agreeing results of this class that carried measurements."""
    energy_kwh_per_sample_median: Mapped[float | None] = mapped_column(Float)
    energy_kwh_per_sample_spread: Mapped[float | None] = mapped_column(Float)
    decode_tokens_per_s_median: Mapped[float | None] = mapped_column(Float)
    decode_tokens_per_s_spread: Mapped[float | None] = mapped_column(Float)
    ttft_s_median: Mapped[float | None] = mapped_column(Float)
    ttft_s_spread: Mapped[float | None] = mapped_column(Float)
    peak_rss_bytes_median: Mapped[float | None] = mapped_column(Float)
    peak_rss_bytes_spread: Mapped[float | None] = mapped_column(Float)
    flagged: Mapped[int] = mapped_column(Integer)
    """How many of its results were flagged (``results.measurement_outlier``)."""
    created_at: Mapped[datetime]
