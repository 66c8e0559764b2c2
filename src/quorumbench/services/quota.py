"""Where an account stands with the registration limits ("earn your submit").

Two limits apply to registering a model (admins, requests with the ``admin`` scope,
are exempt from both):

* the **quota**: ``quota_evaluations`` accepted evaluations of other people's models
  in the last ``quota_window_hours``. An accepted evaluation is a counted result, not an
  outlier, on a task of another account's model that finalized DONE;
* the **weekly limit**: at most ``registrations_per_week`` registrations in the last
  7 days (retired models count: retiring frees no slot).

:func:`quota` reads both once; ``GET /v0/me/quota``, ``GET /v0/me/account`` and the
submission report (``services/submissions``) show what it returns.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from pydantic import BaseModel, Field
from sqlalchemy import func, select

from quorumbench.db.models import Model, Result, Task
from quorumbench.protocol import TaskStatus
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext

WEEK = timedelta(days=7)


class QuotaStatus(BaseModel):
    """An account's standing with the registration limits."""

    accepted_evaluations: int = Field(
        description="Counted, non-outlier results on DONE tasks of other accounts' models "
        "in the window."
    )
    evaluations_needed: int = Field(
        description="How many more accepted evaluations registering needs (0: earned, or exempt)."
    )
    quota_evaluations: int = Field(description="How many the quota asks for in the window.")
    window_hours: int = Field(description="The quota's window.")
    registrations_last_7_days: int
    registrations_per_week: int
    next_registration_in_s: int | None = Field(
        description="At the weekly limit: seconds until the oldest registration in the "
        "window drops out (null otherwise, or when none ever will: a limit of 0)."
    )
    exempt: bool = Field(description="An admin request: exempt from both limits.")
    can_register: bool = Field(description="Both limits allow a registration now.")


def quota(ctx: ServerContext, principal: Principal) -> QuotaStatus:
    """Where ``principal``'s account stands (see the module docstring)."""
    settings = ctx.settings
    now = ctx.now()
    with ctx.db.read() as session:
        recent = session.scalar(
            select(func.count())
            .select_from(Model)
            .where(Model.owner_id == principal.account_id, Model.created_at > now - WEEK)
        )
        earned = session.scalar(
            select(func.count())
            .select_from(Result)
            .join(Task, Task.id == Result.task_id)
            .join(Model, Model.id == Task.model_id)
            .where(
                Result.account_id == principal.account_id,
                Result.counted,
                Result.outlier.is_(False),
                Task.status == TaskStatus.DONE,
                Model.owner_id != principal.account_id,
                Result.submitted_at > now - timedelta(hours=settings.quota_window_hours),
            )
        )
    recent, earned = recent or 0, earned or 0
    exempt = principal.acts_as_admin
    at_limit = not exempt and recent >= settings.registrations_per_week
    needed = 0 if exempt else max(0, settings.quota_evaluations - earned)
    return QuotaStatus(
        accepted_evaluations=earned,
        evaluations_needed=needed,
        quota_evaluations=settings.quota_evaluations,
        window_hours=settings.quota_window_hours,
        registrations_last_7_days=recent,
        registrations_per_week=settings.registrations_per_week,
        next_registration_in_s=registration_wait(ctx, principal, recent) if at_limit else None,
        exempt=exempt,
        can_register=exempt or (needed == 0 and not at_limit),
    )


def registration_wait(ctx: ServerContext, principal: Principal, recent: int) -> int | None:
    """Seconds until enough of the account's registrations leave the 7-day window for one
    more to fit (the oldest one, when the account is at the limit); None if none will."""
    now = ctx.now()
    leaving = recent - ctx.settings.registrations_per_week  # 0: the oldest one
    with ctx.db.read() as session:
        created: datetime | None = session.scalars(
            select(Model.created_at)
            .where(Model.owner_id == principal.account_id, Model.created_at > now - WEEK)
            .order_by(Model.created_at, Model.id)
            .offset(leaving)
            .limit(1)
        ).first()
    if created is None:  # registrations_per_week is 0: none ever fits
        return None
    return max(1, math.ceil((created + WEEK - now).total_seconds()))
