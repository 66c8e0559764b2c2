from __future__ import annotations

from fastapi import APIRouter, Query, status

from quorumbench.api.deps import Context, CurrentPrincipal, Writer
from quorumbench.api.params import MAX_INT, RowId
from quorumbench.api.schemas import FailureOut, FailuresOut, ModelIn, ModelOut
from quorumbench.services import failures as failure_log
from quorumbench.services import models as registry
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch

router = APIRouter(prefix="/v0/models", tags=["models"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ModelOut)
def register(body: ModelIn, ctx: Context, principal: Writer) -> ModelOut:
    """Register a model by ref (needs the ``model:register`` scope)."""
    model = registry.register_model(ctx, principal, body.ref, name=body.name)
    schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))  # its first tasks, this epoch
    return ModelOut.model_validate(model)


@router.get("", response_model=list[ModelOut])
def list_models(
    ctx: Context,
    limit: int = Query(100, ge=1, le=1000),
    after_id: int = Query(
        0, ge=0, le=MAX_INT, description="Keyset pagination: ids after this one."
    ),
) -> list[ModelOut]:
    return [
        ModelOut.model_validate(m)
        for m in registry.list_models(ctx, limit=limit, after_id=after_id)
    ]


@router.get("/{model_id}", response_model=ModelOut)
def get_model(model_id: RowId, ctx: Context) -> ModelOut:
    return ModelOut.model_validate(registry.get_model(ctx, model_id))


@router.get("/{model_id}/failures", response_model=FailuresOut)
def model_failures(
    model_id: RowId,
    ctx: Context,
    principal: CurrentPrincipal,
    limit: int = Query(50, ge=1, le=200),
    before: int | None = Query(None, ge=1, le=MAX_INT, description="Reports older than this id."),
) -> FailuresOut:
    """Why the model's tasks failed, as its runners reported it, newest first (the
    model's owner, or a request with the ``admin`` scope). No runner or account is named."""
    found = failure_log.model_failures(ctx, principal, model_id, limit=limit, before=before)
    return FailuresOut(
        model_id=found.model.id,
        paused_at=found.model.paused_at,
        paused_reason=found.model.paused_reason,
        failures=[FailureOut.model_validate(f) for f in found.failures],
        next_before=found.failures[-1].id if len(found.failures) == limit else None,
    )


@router.post("/{model_id}/resume", response_model=ModelOut)
def resume(model_id: RowId, ctx: Context, principal: Writer) -> ModelOut:
    """Resume a paused model (its owner with ``model:register``, or ``admin``): it is
    scheduled again and its open tasks are claimable. A model not paused is unchanged."""
    resumed = failure_log.resume_model(ctx, principal, model_id)
    if resumed.changed:
        schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))  # its tasks of this epoch, now
    return ModelOut.model_validate(resumed.model)
