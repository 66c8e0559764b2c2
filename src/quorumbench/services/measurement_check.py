"""The measurement cross-check of a DONE task, in the transaction that finalizes it
(``services/finalize.py``).

The agreeing results that carried measurements are grouped by hardware class
(``results.hardware_class``, or ``core.efficiency.hardware_class`` of the stored
machine for a result stored before it was kept); per class the median and spread of
energy per sample, decode tokens/s, time to first token and peak RSS go to
``task_measurements``, and a result whose energy per sample is more than
``measurement_outlier_factor`` off its class's median gets
``results.measurement_outlier`` (``core/measurement_check.py``).

This changes no score, consensus, leaderboard row or reputation: the flag is shown on
the runner's page (``services/views/runner.py``) and nothing else reads it. Everything
it uses is in the public log's entry of the task, so anyone can recompute it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, String, bindparam, insert, select, update

from quorumbench.core.efficiency import hardware_class
from quorumbench.core.measurement_check import QUANTITIES, ClassCheck, Measured, cross_check
from quorumbench.db.measurement_models import TaskMeasurement
from quorumbench.db.models import Result
from quorumbench.services.context import ServerContext

_AGREEING = (
    select(Result.id, Result.n, Result.hardware, Result.hardware_class, Result.measurements)
    .where(Result.id.in_(bindparam("ids", expanding=True)))
    .order_by(Result.id)
)
_SET_CLASS = (
    update(Result)
    .where(Result.id == bindparam("id_", type_=Integer))
    .values(hardware_class=bindparam("class_", type_=String))
)
_FLAG = (
    update(Result)
    .where(Result.id.in_(bindparam("ids", expanding=True)))
    .values(measurement_outlier=True)
)
_STATS = insert(TaskMeasurement)


def result_class(hardware: Any) -> str:
    """The hardware class of a result's stored ``hardware`` (``{"hardware": Machine
    fields, ...}``); ``unknown`` when it names no machine."""
    machine = hardware.get("hardware") if isinstance(hardware, dict) else None
    return hardware_class(machine if isinstance(machine, dict) else {})


def check_measurements(
    ctx: ServerContext, conn: Connection, task_id: int, agreeing: Sequence[int], now: datetime
) -> list[ClassCheck]:
    """Store the per-class statistics of a DONE task's agreeing results (ids) and flag
    their energy outliers; the classes checked (none when no result measured)."""
    if not agreeing:
        return []
    measured: list[Measured] = []
    unclassed: list[dict[str, Any]] = []
    for row in conn.execute(_AGREEING, {"ids": sorted(agreeing)}):
        if not isinstance(row.measurements, dict):
            continue  # sent none (JSON null or SQL NULL)
        cls = row.hardware_class
        if cls is None:  # stored before migration 0024
            cls = result_class(row.hardware)
            unclassed.append({"id_": row.id, "class_": cls})
        measured.append(Measured(row.id, cls, row.n, row.measurements))
    if unclassed:
        conn.execute(_SET_CLASS, unclassed)
    checks = cross_check(measured, ctx.settings.measurement_outlier_factor)
    if checks:
        conn.execute(_STATS, [_stats_row(task_id, check, now) for check in checks])
    flagged = sorted(i for check in checks for i in check.flagged)
    if flagged:
        conn.execute(_FLAG, {"ids": flagged})
    return checks


def _stats_row(task_id: int, check: ClassCheck, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {
        "task_id": task_id,
        "hardware_class": check.hardware_class,
        "n": check.n,
        "flagged": len(check.flagged),
        "created_at": now,
    }
    for name in QUANTITIES:
        stats = check.stats.get(name)
        row[f"{name}_median"] = None if stats is None else stats.median
        row[f"{name}_spread"] = None if stats is None else stats.spread
    return row
