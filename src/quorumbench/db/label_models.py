"""The ask cache's tables (``services/label_cache.py`` keeps them, ``services/ask_cache.py``
reads them; migration 0016 makes them). The ``quorumbench.db`` package imports this
module, so they are in ``Base.metadata`` wherever the models are."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from quorumbench.db.models import Base


class LabelSet(Base):
    """One (benchmark version, label combination) cell of the ask cache
    (``services/label_cache.py``): the five taxonomy labels its samples share.

    Each benchmark also has one *total* cell, every label ``*``: a model's sums over
    all the benchmark's samples, which a plan that keeps every cell of the benchmark
    reads instead of the cells one by one.
    """

    __tablename__ = "label_sets"
    __table_args__ = (
        UniqueConstraint("benchmark_id", "skill", "subject", "target", "format", "language"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"))
    skill: Mapped[str] = mapped_column(String(32))
    subject: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(32))
    format: Mapped[str] = mapped_column(String(32))
    language: Mapped[str] = mapped_column(String(8))


class LabelAggregate(Base):
    """A model's running sums over the consensus-verified samples of one label set
    (``services/label_cache.py``), kept by the transaction that finalizes a task DONE.

    ``benchmark_id`` repeats the set's, so the ask's one grouped read needs no join.
    """

    __tablename__ = "label_aggregates"
    __table_args__ = (
        # covering the ask's grouped read: the set ids' ranges, then the sums
        Index(
            "ix_label_aggregates_covering",
            "label_set_id",
            "model_id",
            "benchmark_id",
            "n_samples",
            "sample_sum",
            "chance_sum",
            "updated_at",
        ),
    )

    label_set_id: Mapped[int] = mapped_column(ForeignKey("label_sets.id"), primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(Integer)
    n_samples: Mapped[int] = mapped_column(Integer)
    sample_sum: Mapped[float] = mapped_column(Float)
    """The sum of the samples' consensus scores."""
    chance_sum: Mapped[float] = mapped_column(Float)
    """The sum of the samples' chance levels."""
    updated_at: Mapped[datetime]
    """When the newest task counted here was finalized."""


class LabelCachedTask(Base):
    """A DONE task whose samples are in ``label_aggregates`` (counted exactly once):
    written with the sums, by the finalizing transaction or the startup backfill."""

    __tablename__ = "label_cached_tasks"

    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), primary_key=True)
    n_samples: Mapped[int] = mapped_column(Integer)
    """How many of its samples were counted (0: none could be labelled)."""
    cached_at: Mapped[datetime]
