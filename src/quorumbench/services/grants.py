"""Role escalation: the ``benchmark:create`` permission of an account.

A token's scopes say what a credential may ask for; creating a benchmark also needs
the account to hold ``benchmark:create`` (seed 000's "role escalation"). An account
gets it automatically once it has ``benchmark_create_after`` accepted evaluations
agreeing with consensus (a counted, non-outlier result on a task of another account's
model that finalized DONE: the quota's "accepted evaluation", at any time), and an
admin can grant or revoke it. Every change is a row of ``account_grants``
(append-only): who (an admin, or nobody: automatic), when and why. An admin's
revocation stands: the automatic grant does not come back after it.

The automatic grant is recorded the first time the account's standing is read after
it qualifies (creating a benchmark, its account page, ``GET /v0/me/account``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from quorumbench.db.models import Account, AccountGrant, Model, Result, Task
from quorumbench.errors import ConfigError, NotFoundError, PermissionDeniedError
from quorumbench.protocol import TaskStatus
from quorumbench.services.context import ServerContext

BENCHMARK_CREATE = "benchmark:create"
GRANT, REVOKE = "grant", "revoke"
REASON_MAX = 500


@dataclass(frozen=True)
class GrantStatus:
    """Where an account stands with ``benchmark:create``."""

    held: bool
    agreeing_evaluations: int
    """Its accepted evaluations agreeing with consensus (all time)."""
    needed: int
    """The automatic threshold (``benchmark_create_after``; 0: never automatic)."""
    action: str | None = None
    """The latest recorded change: ``grant`` or ``revoke`` (None: none yet)."""
    changed_at: datetime | None = None
    by: str | None = None
    """The admin who made the change (None: automatic, or no change)."""
    reason: str | None = None


def agreeing_evaluations(session: Session, account_id: int) -> int:
    """Counted, non-outlier results of ``account_id`` on DONE tasks of other accounts'
    models: evaluations that agreed with consensus."""
    found = session.scalar(
        select(func.count())
        .select_from(Result)
        .join(Task, Task.id == Result.task_id)
        .join(Model, Model.id == Task.model_id)
        .where(
            Result.account_id == account_id,
            Result.counted,
            Result.outlier.is_(False),
            Task.status == TaskStatus.DONE,
            Model.owner_id != account_id,
        )
    )
    return int(found or 0)


def _latest(session: Session, account_id: int) -> AccountGrant | None:
    return session.scalars(
        select(AccountGrant)
        .where(AccountGrant.account_id == account_id, AccountGrant.permission == BENCHMARK_CREATE)
        .order_by(AccountGrant.id.desc())
        .limit(1)
    ).first()


def _status(session: Session, row: AccountGrant | None, agreeing: int, needed: int) -> GrantStatus:
    if row is None:
        return GrantStatus(False, agreeing, needed)
    by = session.get(Account, row.by_account_id) if row.by_account_id is not None else None
    return GrantStatus(
        row.action == GRANT,
        agreeing,
        needed,
        row.action,
        row.created_at,
        by.name if by is not None else None,
        row.reason,
    )


def grant_status(ctx: ServerContext, account_id: int) -> GrantStatus:
    """The account's standing, recording the automatic grant if it has just earned it
    (a read; a write only then)."""
    needed = ctx.settings.benchmark_create_after
    with ctx.db.read() as session:
        agreeing = agreeing_evaluations(session, account_id)
        row = _latest(session, account_id)
        if row is not None or needed == 0 or agreeing < needed:
            return _status(session, row, agreeing, needed)
    with ctx.db.write() as session:
        row = _latest(session, account_id)  # another request may have recorded it
        if row is None:
            row = AccountGrant(
                account_id=account_id,
                permission=BENCHMARK_CREATE,
                action=GRANT,
                by_account_id=None,
                reason=f"automatic: {agreeing} accepted evaluations agreeing with consensus "
                f"(the threshold is {needed})",
                created_at=ctx.now(),
            )
            session.add(row)
            session.flush()
        return _status(session, row, agreeing, needed)


def require_benchmark_create(ctx: ServerContext, account_id: int, acts_as_admin: bool) -> None:
    """PermissionDeniedError unless the account holds ``benchmark:create`` (an admin
    request always may)."""
    if acts_as_admin:
        return
    status = grant_status(ctx, account_id)
    if status.held:
        return
    if status.action == REVOKE:
        raise PermissionDeniedError(
            f"this account's {BENCHMARK_CREATE} permission was revoked by an admin"
        )
    earn = (
        f"it comes with {status.needed} accepted evaluations agreeing with consensus "
        f"(this account has {status.agreeing_evaluations}), or from an admin"
        if status.needed
        else "an admin grants it"
    )
    raise PermissionDeniedError(f"this account does not hold {BENCHMARK_CREATE}: {earn}")


def change_grant(
    ctx: ServerContext, admin_account_id: int, account_name: str, action: str, reason: str | None
) -> GrantStatus:
    """An admin grants (``grant``) or revokes (``revoke``) ``benchmark:create`` of
    ``account_name``; recorded with the admin and the reason. The caller checked that
    the request acts as admin."""
    if action not in (GRANT, REVOKE):
        raise ConfigError(f"unknown grant action {action!r}")
    text = " ".join((reason or "").split())
    if len(text) > REASON_MAX or not text.isprintable():
        raise ConfigError(f"a reason is at most {REASON_MAX} printable characters")
    with ctx.db.write() as session:
        account = session.scalars(select(Account).where(Account.name == account_name)).first()
        if account is None:
            raise NotFoundError(f"no account named {account_name!r}")
        row = AccountGrant(
            account_id=account.id,
            permission=BENCHMARK_CREATE,
            action=action,
            by_account_id=admin_account_id,
            reason=text or ("granted" if action == GRANT else "revoked") + " by an admin",
            created_at=ctx.now(),
        )
        session.add(row)
        session.flush()
        agreeing = agreeing_evaluations(session, account.id)
        return _status(session, row, agreeing, ctx.settings.benchmark_create_after)
