from __future__ import annotations

from fastapi import APIRouter, Query, status

from quorumbench.api.deps import Context, Writer
from quorumbench.api.schemas import ModelIn, ModelOut
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
    after_id: int = Query(0, ge=0, description="Keyset pagination: ids after this one."),
) -> list[ModelOut]:
    return [
        ModelOut.model_validate(m)
        for m in registry.list_models(ctx, limit=limit, after_id=after_id)
    ]


@router.get("/{model_id}", response_model=ModelOut)
def get_model(model_id: int, ctx: Context) -> ModelOut:
    return ModelOut.model_validate(registry.get_model(ctx, model_id))
