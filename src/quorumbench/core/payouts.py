"""A pool's payout record in the public log, and the check that recomputes it (pure).

When a pool settles, the server appends one log entry with a top-level ``payout`` key
(built by :func:`payout_record`)::

    {"payout": {
        "pool": {"id": 7, "title": "Small models, GSM8K"},
        "funds": 1000,                       # integer minor units paid out
        "rule": "ArithmeticDecrease",
        "params": {"k": 10},                 # every parameter, defaults filled in
        "ties": "exact",                     # or "statistical"
        "ended_at": "2026-11-30T00:00:00+00:00",
        "standing": [                        # the frozen final standing, best first
            {"entry": 12, "score": 0.81, "ci_low": 0.75, "ci_high": 0.86,
             "n_samples": 200, "chance": 0.0,
             "model_id": 3, "model_ref": "hf/Qwen/Qwen2.5-0.5B", "account": "ana"},
            ...],
        "amounts": [                         # what core.allocation.allocate gave, best first
            {"entry": 12, "amount": 400, "place": 1, "group": 0}, ...]}}

Only ``entry``, ``score``, ``ci_low``, ``ci_high``, ``n_samples`` and ``chance`` of a
standing row feed the allocation; other fields (``model_id``, ``model_ref``,
``account``) are for display. :func:`check_payouts` recomputes every record's amounts
with :func:`~quorumbench.core.allocation.allocate` from its own standing, rule,
parameters, tie policy and funds (``quorumbench verify`` runs it over the whole log).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quorumbench.core.allocation import Payout, Rule, Standing, allocate, parse_rule

RECORD_FIELDS = ("pool", "funds", "rule", "params", "ties", "ended_at", "standing", "amounts")
STANDING_FIELDS = ("entry", "score", "ci_low", "ci_high", "n_samples", "chance")
AMOUNT_FIELDS = ("entry", "amount", "place", "group")


def payout_record(
    pool_id: int,
    funds: int,
    rule: Rule,
    ties: str,
    standings: Sequence[Standing],
    payouts: Sequence[Payout],
    ended_at_iso: str,
    title: str,
    *,
    display: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The log entry of a pool's settlement (format in the module docstring).

    ``payouts`` is what :func:`allocate` returned for ``funds``, ``standings``, ``rule``
    and ``ties``; the standing rows follow its order (best first). ``display`` maps an
    entry id to extra fields shown with its row (e.g. ``model_id``, ``model_ref``,
    ``account``); they may not replace a field the allocation reads (``ValueError``).
    """
    extra = display or {}
    order = {p.entry_id: i for i, p in enumerate(payouts)}
    rows = []
    for s in sorted(standings, key=lambda s: order.get(s.entry_id, len(order))):
        fields = dict(extra.get(s.entry_id, {}))
        clash = sorted(set(fields) & set(STANDING_FIELDS))
        if clash:
            raise ValueError(f"display fields of entry {s.entry_id} replace {', '.join(clash)}")
        rows.append(
            {
                "entry": s.entry_id,
                "score": s.score,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "n_samples": s.n_samples,
                "chance": s.chance,
                **fields,
            }
        )
    return {
        "payout": {
            "pool": {"id": pool_id, "title": title},
            "funds": funds,
            "rule": rule.name,
            "params": rule.as_dict(),
            "ties": ties,
            "ended_at": ended_at_iso,
            "standing": rows,
            "amounts": [
                {"entry": p.entry_id, "amount": p.amount, "place": p.place, "group": p.group}
                for p in payouts
            ],
        }
    }


def _rows(body: Mapping[str, Any], key: str, fields: Sequence[str]) -> list[Mapping[str, Any]]:
    rows = body.get(key)
    if not isinstance(rows, list):
        raise ValueError(f"its {key} is not a list")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or any(f not in row for f in fields):
            raise ValueError(f"{key} row {i} lacks one of {', '.join(fields)}")
        entry = row["entry"]
        if not isinstance(entry, int) or isinstance(entry, bool):
            raise ValueError(f"{key} row {i}: entry is not an integer id")
    return rows


def standings_from_record(record: Mapping[str, Any]) -> list[Standing]:
    """The standing a payout record logs (``ValueError`` when it is malformed).

    Values are passed on as logged; :func:`allocate` checks their types and ranges.
    """
    body = record.get("payout")
    if not isinstance(body, Mapping):
        raise ValueError("not a payout record")
    return [
        Standing(
            entry_id=row["entry"],
            score=row["score"],
            ci_low=row["ci_low"],
            ci_high=row["ci_high"],
            n_samples=row["n_samples"],
            chance=row["chance"],
        )
        for row in _rows(body, "standing", STANDING_FIELDS)
    ]


def _recompute(record: Mapping[str, Any]) -> tuple[list[Payout], list[Mapping[str, Any]]]:
    body = record["payout"]
    if not isinstance(body, Mapping):
        raise ValueError("its payout is not an object")
    missing = [f for f in RECORD_FIELDS if f not in body]
    if missing:
        raise ValueError(f"it lacks {', '.join(missing)}")
    if not isinstance(body["rule"], str) or not isinstance(body["params"], Mapping):
        raise ValueError("its rule is not a name with a parameter object")
    rule = parse_rule(body["rule"], body["params"])
    if rule.as_dict() != dict(body["params"]):
        raise ValueError(f"its params are not given in full (the rule's are {rule.as_dict()})")
    standings = standings_from_record(record)
    logged = _rows(body, "amounts", AMOUNT_FIELDS)
    return allocate(body["funds"], standings, rule, body["ties"]), logged


def _compare(expected: list[Payout], logged: list[Mapping[str, Any]]) -> list[str]:
    problems: list[str] = []
    want = {p.entry_id: p for p in expected}
    got = {row["entry"]: row for row in logged}
    if len(got) != len(logged):
        problems.append("amounts name an entry twice")
    for p in expected:
        row = got.get(p.entry_id)
        if row is None:
            problems.append(f"entry {p.entry_id} has no amount")
            continue
        for field in ("amount", "place", "group"):
            value = row[field]
            if type(value) is not int or value != getattr(p, field):
                problems.append(
                    f"entry {p.entry_id}: logged {field} {value!r}, recomputed {getattr(p, field)}"
                )
    problems += [f"amounts name entry {e}, not in the standing" for e in got if e not in want]
    if not problems and [row["entry"] for row in logged] != [p.entry_id for p in expected]:
        problems.append("amounts are not in place order")
    return problems


def check_payouts(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem with the payout records in ``entries``; empty when all recompute.

    ``entries`` are public log entries (or the served rows ``{"index", "leaf_hash",
    "entry"}``, whose ``entry`` is read); those with a top-level ``payout`` key are
    payout records. Each is recomputed with :func:`allocate` and compared entry by
    entry (amount, place, group); a pool paid out twice is a problem too.
    """
    problems: list[str] = []
    paid: dict[Any, int] = {}
    for position, item in enumerate(entries):
        inner = item.get("entry")
        record = inner if "payout" not in item and isinstance(inner, Mapping) else item
        if "payout" not in record:
            continue
        body = record["payout"]
        pool = body.get("pool") if isinstance(body, Mapping) else None
        pool_id = pool.get("id") if isinstance(pool, Mapping) else None
        where = f"log entry {position} (payout of pool {pool_id})"
        if isinstance(pool_id, int | str):
            if pool_id in paid:
                problems.append(f"{where}: pool paid out before, at log entry {paid[pool_id]}")
            paid.setdefault(pool_id, position)
        try:
            expected, logged = _recompute(record)
        except ValueError as exc:
            problems.append(f"{where}: cannot recompute: {exc}")
            continue
        problems += [f"{where}: {p}" for p in _compare(expected, logged)]
    return problems
