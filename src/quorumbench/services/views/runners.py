"""The runners page: every runner with its contributions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from quorumbench.db.models import Account, Result, Runner
from quorumbench.services.board import kept
from quorumbench.services.context import ServerContext


@dataclass(frozen=True)
class RunnerRow:
    id: int
    name: str
    account: str
    results: int
    agreements: int
    outliers: int
    agreement_rate: float | None
    suspended: bool
    last_seen_at: datetime | None
    measurement_flags: int = 0
    """Results whose energy per sample was flagged against their hardware class
    (``services/measurement_check.py``); they change no score or reputation."""


def runner_list(ctx: ServerContext) -> list[RunnerRow]:
    """Every runner with its contributions, most results first (kept, :func:`kept`:
    counting results scans the whole table)."""
    return kept(ctx, ("runners",), lambda: runner_rows(ctx))


def runner_rows(
    ctx: ServerContext, account_id: int | None = None, runner_id: int | None = None
) -> list[RunnerRow]:
    """Every runner (with ``account_id``: that account's; with ``runner_id``: that one)
    with its contributions, most results first, read now."""
    counted = select(Result.runner_id, func.count()).group_by(Result.runner_id)
    listed = select(Runner, Account.name).join(Account, Account.id == Runner.account_id)
    if account_id is not None:
        counted = counted.where(Result.account_id == account_id)
        listed = listed.where(Runner.account_id == account_id)
    if runner_id is not None:
        counted = counted.where(Result.runner_id == runner_id)
        listed = listed.where(Runner.id == runner_id)
    flags = counted.where(Result.measurement_outlier)
    with ctx.db.read() as session:
        counts: dict[int, int] = {runner_id: n for runner_id, n in session.execute(counted)}
        flagged: dict[int, int] = {runner_id: n for runner_id, n in session.execute(flags)}
        rows = session.execute(listed)
        out = [
            RunnerRow(
                r.id,
                r.name,
                account,
                counts.get(r.id, 0),
                r.agreements,
                r.outliers,
                r.agreements / (r.agreements + r.outliers) if r.agreements + r.outliers else None,
                r.suspended,
                r.last_seen_at,
                flagged.get(r.id, 0),
            )
            for r, account in rows
        ]
    out.sort(key=lambda r: (-r.results, r.id))
    return out
