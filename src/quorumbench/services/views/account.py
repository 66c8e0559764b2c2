"""The signed-in account's page (``/account``): its quota, models, runners and tokens.

Everything here is the account's own: its registration quota (``services.models.quota``,
the same numbers as ``GET /v0/me/quota``), its models with their status, its runners
with their contributions (the runners page's rows, ``views/runners.py``) and keys
(``services/runner_keys.py``), and its API tokens (``services/accounts.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from quorumbench.db.models import Model, Task
from quorumbench.protocol import TaskStatus
from quorumbench.services.accounts import (
    Principal,
    TokenInfo,
    grantable_scopes,
    list_tokens,
)
from quorumbench.services.context import ServerContext
from quorumbench.services.models import quota
from quorumbench.services.runner_keys import runner_keys
from quorumbench.services.views.runners import RunnerRow, runner_rows

MODEL_STATUSES = ("pending", "ranked", "disputed", "paused", "inactive")
"""What :func:`account_models` says of a model (see :class:`OwnModel`)."""


@dataclass(frozen=True)
class OwnModel:
    """One of the account's models. ``status``: ``paused`` (its tasks kept failing;
    not scheduled until its owner resumes it), ``inactive`` (not scheduled), ``ranked``
    (at least one task DONE: it has scores on the board), ``disputed`` (tasks, none
    DONE yet, and one DISPUTED), else ``pending`` (waiting for its first tasks)."""

    id: int
    name: str
    ref: str
    status: str
    done_tasks: int
    disputed_tasks: int
    created_at: datetime
    paused_reason: str | None


@dataclass(frozen=True)
class OwnRunner:
    """One of the account's runners, with its signing keys (revoked ones too)."""

    row: RunnerRow
    keys: list[dict[str, Any]]


@dataclass(frozen=True)
class AccountView:
    principal: Principal
    quota: dict[str, Any]
    models: list[OwnModel]
    runners: list[OwnRunner]
    tokens: list[TokenInfo]
    grantable: tuple[str, ...]


def _status(model: Model, done: int, disputed: int) -> str:
    if model.paused_at is not None:
        return "paused"
    if not model.active:
        return "inactive"
    if done:
        return "ranked"
    return "disputed" if disputed else "pending"


def account_models(ctx: ServerContext, principal: Principal) -> list[OwnModel]:
    """The account's models, newest first, each with its status (:class:`OwnModel`)."""
    counted = (TaskStatus.DONE, TaskStatus.DISPUTED)
    with ctx.db.read() as session:
        models = list(
            session.scalars(
                select(Model)
                .where(Model.owner_id == principal.account_id)
                .order_by(Model.created_at.desc(), Model.id.desc())
            )
        )
        tally: dict[tuple[int, str], int] = {
            (model_id, str(status)): n
            for model_id, status, n in session.execute(
                select(Task.model_id, Task.status, func.count())
                .join(Model, Model.id == Task.model_id)
                .where(Model.owner_id == principal.account_id, Task.status.in_(counted))
                .group_by(Task.model_id, Task.status)
            )
        }
    out = []
    for m in models:
        done = tally.get((m.id, str(TaskStatus.DONE)), 0)
        disputed = tally.get((m.id, str(TaskStatus.DISPUTED)), 0)
        out.append(
            OwnModel(
                m.id,
                m.name,
                m.ref,
                _status(m, done, disputed),
                done,
                disputed,
                m.created_at,
                m.paused_reason,
            )
        )
    return out


def account_runners(ctx: ServerContext, principal: Principal) -> list[OwnRunner]:
    """The account's runners (most results first) with their keys."""
    return [
        OwnRunner(row, runner_keys(ctx, principal, row.name))
        for row in runner_rows(ctx, principal.account_id)
    ]


def account_view(ctx: ServerContext, principal: Principal) -> AccountView:
    """Everything ``/account`` shows of ``principal``'s account."""
    return AccountView(
        principal,
        quota(ctx, principal),
        account_models(ctx, principal),
        account_runners(ctx, principal),
        list_tokens(ctx, principal),
        grantable_scopes(principal),
    )
