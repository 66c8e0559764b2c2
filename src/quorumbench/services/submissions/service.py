"""Validate a submission against the database too, and register it: one code path.

:func:`validate_submission` adds to the model checks (``checks.py``) what the database
knows: the account's limits (``services/quota.py``), duplicates (the same pinned ref,
or the same weights under another ref), whether an adapter's base is registered here,
and the cost estimate over the active benchmarks. :func:`register_submission`
registers exactly when that report has no error; otherwise it raises the first
error's exception, with the report attached (``QuorumError.report``), so the API
answers the same problem as before with every finding beside it.

A repeat is not a duplicate: when the caller's own account registered the same pinned
ref already, registering again changes nothing and answers with that model (the API:
200 instead of 201), whatever the limits say, so a form posted twice registers once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.db.models import Benchmark, Model
from quorumbench.errors import (
    DuplicateModelError,
    QuorumError,
    QuotaNotEarnedError,
    RateLimitedError,
)
from quorumbench.evaluation.endpoints import Resolver
from quorumbench.evaluation.refs import ModelRef, engine_for, parse_ref
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.model_metadata import ModelMetadata, inspect_model
from quorumbench.services.quota import QuotaStatus, quota
from quorumbench.services.submissions.checks import (
    Inspected,
    Inspector,
    Submission,
    detected,
    inspect_submission,
)
from quorumbench.services.submissions.estimate import BenchmarkLoad, describe, estimate_epoch
from quorumbench.services.submissions.report import (
    CostEstimate,
    ExistingModel,
    Findings,
    SubmissionReport,
)


@dataclass(frozen=True)
class Validation:
    report: SubmissionReport
    refusal: QuorumError | None
    """The exception a registration raises: the first error's (None: it may register)."""
    meta: ModelMetadata | None
    repeat: Model | None
    """The caller's own model with this pinned ref, when it is a repeat."""


@dataclass(frozen=True)
class Registration:
    model: Model
    report: SubmissionReport
    created: bool
    """False for a repeat: the caller's model with this ref, registered before."""


def existing_model(session: Session, ref: str, weights: str | None) -> Model | None:
    """A registered model with this pinned ref or these weights."""
    condition = Model.ref == ref
    if weights:
        condition = or_(condition, Model.weights_sha256 == weights)
    found: Model | None = session.scalars(select(Model).where(condition)).first()
    return found


def limit_findings(ctx: ServerContext, principal: Principal) -> tuple[Findings, QuotaStatus]:
    """The weekly limit and the earn-your-submit quota, as findings."""
    status = quota(ctx, principal)
    found = Findings()
    settings = ctx.settings
    if status.exempt:
        found.info(
            "limits-exempt",
            "an admin request: exempt from the earn-your-submit quota and the weekly limit",
        )
        return found, status
    recent = status.registrations_last_7_days
    if recent >= settings.registrations_per_week:
        wait = status.next_registration_in_s
        when = f"; the next one is possible in {wait} s" if wait is not None else ""
        found.error(
            "weekly-limit",
            RateLimitedError(
                f"this account registered {recent} models in the last 7 days; the limit is "
                f"{settings.registrations_per_week} per week{when}",
                retry_after=wait,
            ),
        )
    needed = status.evaluations_needed
    if needed:
        found.error(
            "quota-not-earned",
            QuotaNotEarnedError(
                f"earn your submit: registering needs {settings.quota_evaluations} accepted "
                "evaluations (results that agreed with a DONE consensus) of other people's "
                f"models in the last {settings.quota_window_hours} h; this account has "
                f"{status.accepted_evaluations}, so {needed} more "
                f"{'is' if needed == 1 else 'are'} still needed: run a runner "
                "(quorumbench runner start) and register once they are accepted "
                "(GET /v0/me/quota shows where the account stands)",
                accepted_evaluations=status.accepted_evaluations,
                evaluations_needed=needed,
            ),
        )
    if status.can_register:
        found.info(
            "limits-ok",
            f"this account may register: {status.accepted_evaluations} accepted evaluations "
            f"of other people's models in the last {settings.quota_window_hours} h "
            f"({settings.quota_evaluations} needed), {recent} of "
            f"{settings.registrations_per_week} registrations in the last 7 days",
        )
    return found, status


def _existing_out(model: Model, principal: Principal) -> ExistingModel:
    return ExistingModel(
        id=model.id,
        ref=model.ref,
        name=model.name,
        url=f"/models/{model.id}",
        yours=model.owner_id == principal.account_id,
        retired=model.retired_at is not None,
    )


def _duplicate(existing: Model, ref: str, weights: str | None) -> DuplicateModelError:
    if existing.ref == ref:
        why = f"{ref} is registered already"
    else:
        why = f"the weights of {ref} (sha256 {weights}) are registered already as {existing.ref}"
    return DuplicateModelError(
        f"{why}: model {existing.id} ({existing.name}, /models/{existing.id})", existing.id
    )


def _loads(session: Session) -> list[BenchmarkLoad]:
    rows = session.execute(
        select(Benchmark.name, Benchmark.kind, Benchmark.samples_per_task)
        .where(Benchmark.active)
        .order_by(Benchmark.name)
    )
    return [BenchmarkLoad(name, kind, samples) for name, kind, samples in rows]


def _adapter_base(meta: ModelMetadata) -> ModelRef | None:
    """An adapter's pinned base (a GGUF base makes the adapter a llama.cpp model)."""
    if meta.details.get("kind") != "adapter" or not meta.base_ref:
        return None
    return parse_ref(meta.base_ref)


def _database_checks(
    ctx: ServerContext, principal: Principal, inspected: Inspected
) -> tuple[Findings, Model | None, CostEstimate | None]:
    """Duplicates, an adapter's base, the estimate: what the database adds."""
    found = Findings()
    meta = inspected.meta
    assert meta is not None
    pinned = meta.ref.canonical()
    with ctx.db.read() as session:
        existing = existing_model(session, pinned, meta.weights_sha256)
        base = (
            session.scalars(select(Model.id).where(Model.ref == meta.base_ref)).first()
            if meta.details.get("kind") == "adapter" and meta.base_ref
            else None
        )
        loads = _loads(session)
    if meta.details.get("kind") == "adapter" and meta.base_ref:
        here = f"registered here as model {base}" if base else "not registered on this server"
        found.info(
            "base-pinned",
            f"the adapter's base {meta.base_ref} is pinned and was read; it is {here}",
            "ref",
        )
    yours = existing is not None and existing.owner_id == principal.account_id
    if existing is not None and yours and existing.ref == pinned:
        state = " (retired)" if existing.retired_at is not None else ""
        found.info(
            "already-registered",
            f"this account registered {pinned} already, as model {existing.id}{state} "
            f"(/models/{existing.id}): registering it again answers with that model",
            "ref",
        )
    elif existing is not None:
        code = "duplicate-ref" if existing.ref == pinned else "duplicate-weights"
        found.error(code, _duplicate(existing, pinned, meta.weights_sha256), "ref")
    cost = None
    if inspected.size is not None and loads:
        cost = estimate_epoch(inspected.size, loads, ctx.settings.quorum)
        found.info("cost-estimate", describe(cost))
    return found, existing, cost


def validate_submission(
    ctx: ServerContext,
    principal: Principal,
    submission: Submission,
    *,
    inspector: Inspector | None = None,
    resolve: Resolver | None = None,
) -> Validation:
    """Every check of ``submission`` for ``principal``, registering nothing (a dry run).

    ``inspector`` replaces the model reader (default: the context's, else
    :func:`~quorumbench.services.model_metadata.inspect_model`); ``resolve`` the DNS
    lookup of an endpoint's host (tests)."""
    principal.require("model:register")
    limits, status = limit_findings(ctx, principal)
    inspect = inspector or ctx.inspector or inspect_model
    inspected = inspect_submission(
        ctx.settings, submission, inspect, admin=principal.acts_as_admin, resolve=resolve
    )
    rest, existing, cost = Findings(), None, None
    rest.extend(inspected.findings)
    if inspected.meta is not None:
        found, existing, cost = _database_checks(ctx, principal, inspected)
        rest.extend(found)
    repeat = (
        existing
        if existing is not None
        and inspected.meta is not None
        and existing.owner_id == principal.account_id
        and existing.ref == inspected.meta.ref.canonical()
        else None
    )
    findings = Findings()
    if repeat is None:  # a repeat registers nothing: the limits do not apply to it
        findings.extend(limits)
    findings.extend(rest)
    report = SubmissionReport(
        ok=findings.refusal is None,
        ref=submission.ref,
        pinned_ref=inspected.meta.ref.canonical() if inspected.meta else None,
        findings=findings.ordered(),
        metadata=detected(inspected, submission),
        quota=status,
        estimate=cost,
        existing=_existing_out(existing, principal) if existing is not None else None,
    )
    return Validation(report, findings.refusal, inspected.meta, repeat)


def register_submission(
    ctx: ServerContext,
    principal: Principal,
    submission: Submission,
    *,
    inspector: Inspector | None = None,
    resolve: Resolver | None = None,
    record: Callable[[Session, Model], None] | None = None,
) -> Registration:
    """Register ``submission`` exactly when its report has no error (see the module
    docstring); a refusal raises the first error's exception with ``report`` set.
    ``record`` is called with the new model in the transaction that adds it (the
    site's form records its one-time id there, so two posts of one form add one)."""
    checked = validate_submission(ctx, principal, submission, inspector=inspector, resolve=resolve)
    if checked.repeat is not None:
        return Registration(checked.repeat, checked.report, created=False)
    if checked.refusal is not None:
        checked.refusal.report = checked.report
        raise checked.refusal
    meta, metadata = checked.meta, checked.report.metadata
    assert meta is not None and metadata is not None
    try:
        with ctx.db.write() as session:
            model = Model(
                ref=metadata.ref,
                name=metadata.name,
                family=metadata.family,
                engine=engine_for(meta.ref, _adapter_base(meta)),
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
                details=_details(meta, metadata.params_estimated, metadata.effective_params),
                active=True,
                created_at=ctx.now(),
            )
            session.add(model)
            session.flush()
            if record is not None:
                record(session, model)
                session.flush()
    except IntegrityError as exc:  # a concurrent registration of the same model won
        with ctx.db.read() as session:
            existing = existing_model(session, metadata.ref, meta.weights_sha256)
        if existing is None:
            raise
        if existing.owner_id == principal.account_id and existing.ref == metadata.ref:
            return Registration(existing, checked.report, created=False)
        refusal = _duplicate(existing, metadata.ref, meta.weights_sha256)
        refusal.report = checked.report
        raise refusal from exc
    return Registration(model, checked.report, created=True)


def _details(meta: ModelMetadata, estimated: bool, size: int | None) -> dict[str, object]:
    if not estimated:
        return meta.details
    return {**meta.details, "params_estimate": size}
