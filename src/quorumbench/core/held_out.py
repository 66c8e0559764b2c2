"""Recompute a pool's held-out final standing from the public log (pure).

A pool that settled on a held-out final split (``services/pool_final.py``) logs, in
its payout record, ``final_split`` with ``used: true``, the hidden benchmark and the
ids of the held-out tasks its standing counted (``tasks``); ``standing_at`` is the
cut-off. Each of those tasks is in the log as a task entry with ``purpose:
"pool_final"`` and ``pool: <id>``. :func:`check_held_out` checks, for every such
record, that

* every listed task is logged, is that pool's held-out task on the named benchmark,
  and is DONE;
* no DONE held-out task of the pool decided by ``standing_at`` was left out;
* each standing row's ``n_samples``, ``score`` and interval equal what the listed
  tasks of its model give: the mean of their per-sample consensus scores and
  ``core/intervals.score_interval`` of the sum and count (to within 1e-9);
* no task is listed twice, and no listed task's model is missing from the standing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from quorumbench.core.intervals import score_interval

TOLERANCE = 1e-9
HELD_OUT = "pool_final"


def _records(entries: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    out = []
    for position, item in enumerate(entries):
        inner = item.get("entry")
        record = inner if isinstance(inner, Mapping) else item
        out.append((position, record))
    return out


def _held_out_tasks(
    records: Sequence[tuple[int, Mapping[str, Any]]], pool_id: Any
) -> dict[Any, Mapping[str, Any]]:
    found = {}
    for _, record in records:
        task = record.get("task")
        if (
            isinstance(task, Mapping)
            and task.get("purpose") == HELD_OUT
            and task.get("pool") == pool_id
        ):
            found[task.get("id")] = record
    return found


def _samples(record: Mapping[str, Any]) -> list[float]:
    consensus = record["consensus"]
    task = record["task"]
    values = list(consensus.get("sample_consensus") or [])
    if not values and consensus.get("score") is not None:
        values = [consensus["score"]] * int(task["n_samples"])
    return [float(v) for v in values]


def _when(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def _check_record(
    body: Mapping[str, Any], tasks: Mapping[Any, Mapping[str, Any]], where: str
) -> list[str]:
    split = body["final_split"]
    listed = list(split.get("tasks") or [])
    bench = (split.get("benchmark") or {}).get("name")
    problems: list[str] = []
    sums: dict[Any, list[float]] = {}
    seen = set()
    for task_id in listed:
        record = tasks.get(task_id)
        if task_id in seen:  # counted twice, its samples would weigh double
            problems.append(f"{where}: held-out task {task_id} is listed more than once")
            continue
        seen.add(task_id)
        if record is None:
            problems.append(f"{where}: held-out task {task_id} is not in the log")
            continue
        if record["task"]["benchmark"]["name"] != bench:
            problems.append(f"{where}: held-out task {task_id} is not on benchmark {bench}")
            continue
        if record["consensus"]["status"] != "DONE":
            problems.append(f"{where}: held-out task {task_id} is not DONE")
            continue
        sums.setdefault(record["task"]["model"]["id"], []).extend(_samples(record))
    cutoff = _when(body.get("standing_at"))
    for task_id, record in tasks.items():
        decided = _when(record["consensus"].get("decided_at"))
        if (
            task_id not in listed
            and record["consensus"]["status"] == "DONE"
            and cutoff is not None
            and decided is not None
            and decided <= cutoff
        ):
            problems.append(
                f"{where}: held-out task {task_id} was DONE by the cut-off but not counted"
            )
    shown = set()
    for row in body.get("standing", []):
        model = row.get("model_id")
        shown.add(model)
        scores = sums.get(model)
        if not scores:
            problems.append(f"{where}: entry {row.get('entry')} has no counted held-out task")
            continue
        n, total = len(scores), sum(scores)
        low, high = score_interval(total, n)
        if row.get("n_samples") != n:
            problems.append(
                f"{where}: entry {row.get('entry')}: logged n_samples {row.get('n_samples')}, "
                f"recomputed {n}"
            )
            continue
        for field, want in (("score", total / n), ("ci_low", low), ("ci_high", high)):
            got = row.get(field)
            number = isinstance(got, int | float) and not isinstance(got, bool)
            if not number or not abs(float(got) - want) <= TOLERANCE:  # NaN fails too
                problems.append(
                    f"{where}: entry {row.get('entry')}: logged {field} {got!r}, "
                    f"recomputed {want!r}"
                )
    problems += [
        f"{where}: model {m}'s counted held-out tasks are not in the standing"
        for m in sums
        if m not in shown
    ]
    return problems


def check_held_out(entries: Sequence[Mapping[str, Any]]) -> tuple[list[str], int]:
    """Every problem with the held-out standings of the payout records in ``entries``
    (public log entries, or served rows ``{"index", "leaf_hash", "entry"}``), and how
    many records were checked (module docstring)."""
    records = _records(entries)
    problems: list[str] = []
    checked = 0
    for position, record in records:
        body = record.get("payout")
        if not isinstance(body, Mapping):
            continue
        split = body.get("final_split")
        if not isinstance(split, Mapping) or split.get("used") is not True:
            continue
        pool = body.get("pool")
        pool_id = pool.get("id") if isinstance(pool, Mapping) else None
        where = f"log entry {position} (payout of pool {pool_id})"
        checked += 1
        try:
            problems += _check_record(body, _held_out_tasks(records, pool_id), where)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{where}: cannot recompute the held-out standing: {exc!r}")
    return problems, checked
