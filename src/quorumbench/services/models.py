"""The model registry: register by ref, with metadata and the rules that can refuse.

A registration is refused, with the reason, when:

* the ref (after pinning) or the weights' hash is registered already (the error
  points at the existing model);
* the model has more parameters than ``max_params`` (a LoRA adapter: with its base's,
  :func:`~quorumbench.services.model_metadata.model_size`);
* the account registered ``registrations_per_week`` models in the last 7 days;
* the account has not "earned its submit": fewer than ``quota_evaluations``
  accepted results (counted, not outliers, on tasks that finalized DONE) on other
  people's models in the last ``quota_window_hours`` (:func:`quota`);
* the parameter count cannot be determined (the size limit could not be checked);
* the ref is a path on the server's own disk (development refs are admin-only);
* the ref is an ``openai:`` endpoint whose host resolves to a loopback, private,
  link-local, metadata or otherwise non-public address (every volunteer's runner would
  call it from its own machine): checked before anything is inspected, for admins too,
  unless ``allow_private_endpoints`` is set (evaluation/endpoints.py).

Admins (a token of an admin account with the ``admin`` scope) are exempt from the
quota, the rate limit and the two before the last. Only refs, metadata and numbers are
stored; the server never downloads or stores a model's weights (it reads headers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.db.models import Model, Result, Task
from quorumbench.errors import (
    DuplicateModelError,
    NotFoundError,
    QuotaNotEarnedError,
    RateLimitedError,
    RegistrationError,
)
from quorumbench.evaluation.endpoints import Resolver, check_endpoint
from quorumbench.evaluation.refs import parse_ref
from quorumbench.protocol import TaskStatus
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import ModelMetadata, inspect_model, model_size

Inspector = Callable[[str], ModelMetadata]
LOCAL_PREFIXES = ("/", "./", "../", "~")
WEEK = timedelta(days=7)


def _existing(session: Session, ref: str, weights: str | None) -> Model | None:
    condition = Model.ref == ref
    if weights:
        condition = or_(condition, Model.weights_sha256 == weights)
    return session.scalars(select(Model).where(condition)).first()


def quota(ctx: ServerContext, principal: Principal) -> dict[str, Any]:
    """Where the account stands with the registration limits (``GET /v0/me/quota``).

    An accepted evaluation is a counted result, not an outlier, on a task of another
    account's model that finalized DONE, submitted in the last ``quota_window_hours``.
    """
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
    return {
        "accepted_evaluations": earned,
        "evaluations_needed": 0 if exempt else max(0, settings.quota_evaluations - earned),
        "window_hours": settings.quota_window_hours,
        "registrations_last_7_days": recent,
        "registrations_per_week": settings.registrations_per_week,
        "exempt": exempt,
        "can_register": exempt
        or (earned >= settings.quota_evaluations and recent < settings.registrations_per_week),
    }


def _check_limits(ctx: ServerContext, principal: Principal) -> None:
    if principal.acts_as_admin:
        return
    settings = ctx.settings
    status = quota(ctx, principal)
    recent = status["registrations_last_7_days"]
    if recent >= settings.registrations_per_week:
        wait = _registration_wait(ctx, principal, recent)
        when = f"; the next one is possible in {wait} s" if wait is not None else ""
        raise RateLimitedError(
            f"this account registered {recent} models in the last 7 days; the limit is "
            f"{settings.registrations_per_week} per week{when}",
            retry_after=wait,
        )
    needed = status["evaluations_needed"]
    if needed:
        raise QuotaNotEarnedError(
            f"earn your submit: registering needs {settings.quota_evaluations} accepted "
            "evaluations (results that agreed with a DONE consensus) of other people's "
            f"models in the last {settings.quota_window_hours} h; this account has "
            f"{status['accepted_evaluations']}, so {needed} more "
            f"{'is' if needed == 1 else 'are'} still needed: run a runner "
            "(quorumbench runner start) and register once they are accepted "
            "(GET /v0/me/quota shows where the account stands)",
            accepted_evaluations=status["accepted_evaluations"],
            evaluations_needed=needed,
        )


def _registration_wait(ctx: ServerContext, principal: Principal, recent: int) -> int | None:
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


def _check_endpoint(ctx: ServerContext, ref_text: str, resolve: Resolver | None) -> None:
    """Refuse an ``openai:`` endpoint on a non-public address, before any inspection."""
    ref = parse_ref(ref_text, allow_moving=True)
    if ref.scheme != "openai":
        return
    allow = ctx.settings.allow_private_endpoints
    if resolve is None:
        check_endpoint(ref.location, allow_private=allow)
    else:
        check_endpoint(ref.location, allow_private=allow, resolve=resolve)


def register_model(
    ctx: ServerContext,
    principal: Principal,
    ref_text: str,
    *,
    name: str | None = None,
    inspector: Inspector | None = None,
    resolve: Resolver | None = None,
) -> Model:
    """Register a model for ``principal``; see the module docstring for refusals.

    ``resolve`` replaces the DNS lookup of an ``openai:`` endpoint's host (tests).
    """
    principal.require("model:register")
    _check_limits(ctx, principal)
    inspect = inspector or ctx.inspector or inspect_model
    if not principal.acts_as_admin and ref_text.split(":", 1)[-1].startswith(LOCAL_PREFIXES):
        raise RegistrationError(
            "only an admin may register a path on the server's disk; register a Hub ref "
            "(hf:owner/name@commit) or an openai: endpoint"
        )
    _check_endpoint(ctx, ref_text, resolve)
    meta = inspect(ref_text)
    ref = meta.ref.canonical()
    size = model_size(meta.params, meta.details).effective_params  # an adapter: with its base
    if size is None and meta.ref.scheme != "openai" and not principal.acts_as_admin:
        reason = (
            meta.details.get("params_unknown")
            or meta.details.get("base_params_unknown")
            or "its weights could not be inspected"
        )
        raise RegistrationError(
            f"cannot check the size limit of {ref}: the parameter count is unknown ({reason})"
        )
    if size is not None and size > ctx.settings.max_params:
        adapter = " with its base" if size != meta.params else ""
        raise RegistrationError(
            f"{ref} has {size:,} parameters{adapter}; this server accepts at most "
            f"{ctx.settings.max_params:,}"
        )
    with ctx.db.read() as session:
        existing = _existing(session, ref, meta.weights_sha256)
    if existing is not None:
        raise _duplicate(existing, ref, meta.weights_sha256)
    try:
        with ctx.db.write() as session:
            model = Model(
                ref=ref,
                name=name or meta.name,
                owner_id=principal.account_id,
                revision=meta.ref.revision or "",
                weights_sha256=meta.weights_sha256,
                params=meta.params,
                architecture=meta.architecture,
                context_length=meta.context_length,
                dtype=meta.dtype,
                quantization=meta.quantization,
                license=meta.license,
                base_ref=meta.base_ref,
                details=meta.details,
                active=True,
                created_at=ctx.now(),
            )
            session.add(model)
            session.flush()
    except IntegrityError as exc:  # a concurrent registration of the same model won
        with ctx.db.read() as session:
            existing = _existing(session, ref, meta.weights_sha256)
        if existing is None:
            raise
        raise _duplicate(existing, ref, meta.weights_sha256) from exc
    return model


def _duplicate(existing: Model, ref: str, weights: str | None) -> DuplicateModelError:
    if existing.ref == ref:
        why = f"{ref} is registered already"
    else:
        why = f"the weights of {ref} (sha256 {weights}) are registered already as {existing.ref}"
    return DuplicateModelError(f"{why}: model {existing.id} ({existing.name})", existing.id)


def get_model(ctx: ServerContext, model_id: int) -> Model:
    with ctx.db.read() as session:
        model = session.get(Model, model_id)
        if model is None:
            raise NotFoundError(f"no model {model_id}")
        return model


def list_models(ctx: ServerContext, *, limit: int = 100, after_id: int = 0) -> list[Model]:
    with ctx.db.read() as session:
        return list(
            session.scalars(
                select(Model).where(Model.id > after_id).order_by(Model.id).limit(limit)
            )
        )
