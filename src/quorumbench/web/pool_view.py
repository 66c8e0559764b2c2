"""What the pool pages show, shaped from ``services/pools`` for the templates.

The list groups pools in three sections (open, upcoming, ended), each with its funds,
rule and the time left. A pool's page joins its board (ranks with their 95% interval
ranges) to what the rule pays for it (a preview before settlement, the paid amounts
after) and turns its snapshots into a chart and a table of scores per period.
Presentation only: every number comes from the services, nothing is computed twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quorumbench.core.allocation import Payout
from quorumbench.services.pools import PoolDetail, PoolView, StandingRow

SECTIONS = (
    ("open", "Open", ("open", "running")),
    ("upcoming", "Upcoming", ("upcoming",)),
    ("ended", "Ended", ("ended", "settled", "cancelled")),
)
"""The list's sections: id, heading, and the pool phases each one holds."""
PHASE_TEXT = {
    "upcoming": "upcoming",
    "open": "open for entries",
    "running": "running (entries closed)",
    "ended": "ended, settling",
    "settled": "settled",
    "cancelled": "cancelled",
}
RULE_PARAM_TEXT = {"k": "paid places", "q": "decay q", "floor": "floor"}


def fmt_credits(amount: int | None) -> str:
    """Credits (integer minor units) with thousands separators."""
    return "—" if amount is None else f"{amount:,}"


def span_text(seconds: float) -> str:
    """A duration in words, to the minute: ``3 d 4 h``, ``5 h 12 min``, ``40 min``."""
    minutes = max(0, int(seconds // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {mins} min" if mins else f"{hours} h"
    return f"{mins} min" if mins else "under a minute"


def time_left(pool: PoolView, now: datetime) -> str:
    """What the list says about time: until the start, the end, or when it ended."""
    if pool.phase == "upcoming":
        return f"starts in {span_text((pool.starts_at - now).total_seconds())}"
    if pool.phase in ("open", "running"):
        left = span_text((pool.ends_at - now).total_seconds())
        if pool.phase == "open" and pool.join_deadline < pool.ends_at:
            joins = span_text((pool.join_deadline - now).total_seconds())
            return f"{left} left (entries close in {joins})"
        return f"{left} left"
    if pool.phase == "cancelled":
        return "cancelled"
    return "settled" if pool.phase == "settled" else "ended, settling"


def rule_text(rule: str, params: Mapping[str, Any]) -> str:
    """The rule with its parameters in words: ``ArithmeticDecrease (paid places 10)``."""
    shown = ", ".join(f"{RULE_PARAM_TEXT.get(k, k)} {v}" for k, v in sorted(params.items()))
    return f"{rule} ({shown})" if shown else rule


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    pools: list[PoolView]


def sections(pools: Sequence[PoolView]) -> list[Section]:
    """Open pools ending soonest first, upcoming starting soonest first, ended newest
    first."""
    out = []
    for key, title, phases in SECTIONS:
        found = [p for p in pools if p.phase in phases]
        if key == "open":
            found.sort(key=lambda p: (p.ends_at, p.id))
        elif key == "upcoming":
            found.sort(key=lambda p: (p.starts_at, p.id))
        else:
            found.sort(key=lambda p: (p.ends_at, p.id), reverse=True)
        out.append(Section(key, title, found))
    return out


@dataclass(frozen=True)
class BoardLine:
    """One board row with what the rule pays it (None: the rule has no line for it)."""

    row: StandingRow
    payout: Payout | None
    tied: int
    """How many entries share this one's tie group (1: no tie)."""

    @property
    def amount(self) -> int:
        return self.payout.amount if self.payout is not None else 0


def board_lines(detail: PoolDetail) -> list[BoardLine]:
    by_entry = {p.entry_id: p for p in detail.payouts}
    sizes: dict[int, int] = {}
    for p in detail.payouts:
        sizes[p.group] = sizes.get(p.group, 0) + 1
    lines = []
    for row in detail.board:
        payout = by_entry.get(row.entry.id)
        lines.append(BoardLine(row, payout, sizes.get(payout.group, 1) if payout else 1))
    return lines


@dataclass(frozen=True)
class History:
    """The pool board's snapshots as chart series and a table (periods × entries)."""

    series: dict[str, list[tuple[int, float]]]
    periods: list[tuple[int, datetime | str | None]]
    names: list[str]
    cells: dict[tuple[int, str], float]


def _entry_id(item: Mapping[str, Any]) -> int | None:
    found = item.get("entry_id", item.get("entry"))
    if isinstance(found, Mapping):
        found = found.get("id")
    return found if isinstance(found, int) else None


def history(detail: PoolDetail) -> History:
    """Each entry's score in each snapshot (an entry missing from one has no point)."""
    names = {e.id: e.model_name for e in detail.entries}
    series: dict[str, list[tuple[int, float]]] = {}
    cells: dict[tuple[int, str], float] = {}
    periods: list[tuple[int, datetime | str | None]] = []
    for snap in detail.history:
        period = int(snap.get("period", len(periods)))
        periods.append((period, snap.get("taken_at")))
        for item in snap.get("standing") or []:
            entry = _entry_id(item) if isinstance(item, Mapping) else None
            score = item.get("score") if isinstance(item, Mapping) else None
            if entry is None or not isinstance(score, int | float):
                continue
            name = names.get(entry, f"entry {entry}")
            series.setdefault(name, []).append((period, float(score)))
            cells[period, name] = float(score)
    return History(series, periods, sorted(series), cells)


def log_entry_url(record: Mapping[str, Any] | None) -> str | None:
    """The public log entry of a settled pool's payout record."""
    if not record or not isinstance(record.get("log_index"), int):
        return None
    return f"/v0/log/entries?start={record['log_index']}&limit=1"
