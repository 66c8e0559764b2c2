"""The model registry: register (after the submission's validation), list, look up,
retire; a model's failures and its resume."""

from __future__ import annotations

from fastapi import APIRouter, Query, Response, status

from quorumbench.api.deps import Context, CurrentPrincipal, Submitter, Writer
from quorumbench.api.params import MAX_INT, RowId
from quorumbench.api.schemas import FailureOut, FailuresOut, ModelIn, ModelOut
from quorumbench.services import failures as failure_log
from quorumbench.services import models as registry
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch
from quorumbench.services.submissions import Submission, register_submission

router = APIRouter(prefix="/v0/models", tags=["models"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelOut,
    responses={
        200: {
            "model": ModelOut,
            "description": "A repeat: this account registered this pinned ref already; "
            "nothing changed, and this is that model.",
        }
    },
)
def register(body: ModelIn, ctx: Context, principal: Submitter, response: Response) -> ModelOut:
    """Register a model by ref (needs the ``model:register`` scope).

    It is validated first (``POST /v0/submissions/validate`` gives the same report
    without registering): a refusal is the first error's problem, with the whole report
    as its ``report`` member. Posting the same ref again from the same account answers
    200 with the model registered the first time."""
    done = register_submission(ctx, principal, Submission(body.ref, body.name, body.family))
    if done.created:
        schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))  # its first tasks, this epoch
    else:
        response.status_code = status.HTTP_200_OK
    return ModelOut.model_validate(done.model)


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


@router.post("/{model_id}/retire", response_model=ModelOut)
def retire(model_id: RowId, ctx: Context, principal: Writer) -> ModelOut:
    """Retire a model (its owner with ``model:register``, or ``admin``; anyone else's is
    404): it leaves the board and the schedule, and its open tasks are offered to no
    runner; its tasks, results and log entries stay. Retiring again changes nothing."""
    return ModelOut.model_validate(registry.retire_model(ctx, principal, model_id).model)
