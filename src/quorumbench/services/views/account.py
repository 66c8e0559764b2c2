"""The signed-in "my account" view: quota, models, runners with their keys, tokens.

``GET /v0/me/account`` answers it, the ``/account`` page and ``quorumbench account
show`` show it: one view for every surface. Everything in it belongs to the caller's
account: nothing of another account, and no token's secret (only its prefix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select

from quorumbench.db.models import Account, Result, Runner, RunnerKey
from quorumbench.errors import AuthenticationError
from quorumbench.services.accounts import Principal, TokenInfo, grantable_scopes, list_tokens
from quorumbench.services.context import ServerContext
from quorumbench.services.grants import GrantStatus, grant_status
from quorumbench.services.models import OwnedModel, owned_models
from quorumbench.services.quota import QuotaStatus, quota


@dataclass(frozen=True)
class RunnerKeyRow:
    key_id: str
    public_key: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class OwnRunner:
    id: int
    name: str
    created_at: datetime
    last_seen_at: datetime | None
    results: int
    agreements: int
    outliers: int
    agreement_rate: float | None
    """Agreements over agreements and outliers (None before either)."""
    suspended: bool
    keys: list[RunnerKeyRow] = field(default_factory=list)
    """Newest first; at most one is not revoked (registering a key revokes the older)."""


@dataclass(frozen=True)
class AccountView:
    account_id: int
    name: str
    is_admin: bool
    created_at: datetime
    scopes: list[str]
    """What the credential of this request grants."""
    quota: QuotaStatus
    models: list[OwnedModel]
    runners: list[OwnRunner]
    tokens: list[TokenInfo]
    grantable: tuple[str, ...]
    """The scopes this credential may put on a new token (the site's form offers them)."""
    benchmark_create: GrantStatus
    """Whether the account holds ``benchmark:create``, and when, why and by whom it
    was granted or revoked (``services/grants.py``)."""


def own_runners(ctx: ServerContext, principal: Principal) -> list[OwnRunner]:
    """The caller's account's runners, by name, with their results and keys."""
    with ctx.db.read() as session:
        runners = list(
            session.scalars(
                select(Runner)
                .where(Runner.account_id == principal.account_id)
                .order_by(Runner.name)
            )
        )
        ids = [r.id for r in runners]
        results: dict[int, int] = {
            runner_id: n
            for runner_id, n in session.execute(
                select(Result.runner_id, func.count())
                .where(Result.runner_id.in_(ids))
                .group_by(Result.runner_id)
            )
        }
        keys: dict[int, list[RunnerKeyRow]] = {}
        for key in session.scalars(
            select(RunnerKey).where(RunnerKey.runner_id.in_(ids)).order_by(RunnerKey.id.desc())
        ):
            keys.setdefault(key.runner_id, []).append(
                RunnerKeyRow(key.key_id, key.public_key, key.created_at, key.revoked_at)
            )
    return [
        OwnRunner(
            r.id,
            r.name,
            r.created_at,
            r.last_seen_at,
            results.get(r.id, 0),
            r.agreements,
            r.outliers,
            r.agreements / (r.agreements + r.outliers) if r.agreements + r.outliers else None,
            r.suspended,
            keys.get(r.id, []),
        )
        for r in runners
    ]


def account_view(ctx: ServerContext, principal: Principal) -> AccountView:
    """Everything the caller's account page shows."""
    with ctx.db.read() as session:
        account = session.get(Account, principal.account_id)
    if account is None:
        raise AuthenticationError("the account is gone")
    creates = grant_status(ctx, account.id)
    return AccountView(
        account.id,
        account.name,
        account.is_admin,
        account.created_at,
        sorted(principal.scopes),
        quota(ctx, principal),
        owned_models(ctx, principal),
        own_runners(ctx, principal),
        list_tokens(ctx, principal),
        grantable_scopes(principal, creates.held),
        creates,
    )
