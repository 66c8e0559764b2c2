"""The model registry: register by ref, list, look up, retire; the owner's own models.

Registering goes through the submission report (``services/submissions``): a
registration is refused exactly when the report has an error, with the first error's
problem (``docs/submitting.md`` lists every check), and the caller's own repeat of a
registered ref answers with that model. Only refs, metadata and numbers are stored;
the server never downloads or stores a model's weights (it reads headers).

A **retired** model (its owner's or an admin's ``retire_model``) leaves the board
and the schedule: the boards (``services/leaderboard.py``, ``services/board.py``)
leave it out, the scheduler makes no task for it, and its open tasks are offered to
no runner. Its tasks, results and log entries stay, and so do its page and its task
pages; ``quorumbench verify`` accepts it missing from the board because the server
says it is retired (``GET /v0/models/{id}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select, true

from quorumbench.db.models import TASK_EDGE, LeaderboardAggregate, LeaderboardEntry, Model, Task
from quorumbench.errors import NotFoundError
from quorumbench.evaluation.endpoints import Resolver
from quorumbench.protocol import TaskStatus
from quorumbench.services.accounts import Principal
from quorumbench.services.context import ServerContext
from quorumbench.services.quota import QuotaStatus, quota
from quorumbench.services.submissions import Inspector, Submission, register_submission

__all__ = [
    "ModelStatus",
    "OwnedModel",
    "QuotaStatus",
    "Retired",
    "get_model",
    "list_models",
    "owned_models",
    "quota",
    "register_model",
    "retire_model",
]

ModelStatus = Literal["pending", "ranked", "disputed", "paused", "retired"]


def register_model(
    ctx: ServerContext,
    principal: Principal,
    ref_text: str,
    *,
    name: str | None = None,
    family: str | None = None,
    inspector: Inspector | None = None,
    resolve: Resolver | None = None,
) -> Model:
    """Register a model for ``principal`` (or return the caller's own model registered
    under this ref before); see :func:`~quorumbench.services.submissions.register_submission`.

    ``resolve`` replaces the DNS lookup of an ``openai:`` endpoint's host (tests).
    """
    submission = Submission(ref_text, name, family)
    return register_submission(
        ctx, principal, submission, inspector=inspector, resolve=resolve
    ).model


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


@dataclass(frozen=True)
class Retired:
    model: Model
    changed: bool
    """False when it was retired already."""


def retire_model(ctx: ServerContext, principal: Principal, model_id: int) -> Retired:
    """Retire a model (its owner with ``model:register``, or an ``admin`` request).

    Anyone else's model is answered as missing (NotFoundError), so nobody learns which
    ids belong to whom. Retiring twice changes nothing the second time.
    """
    principal.require("model:register")
    with ctx.db.write() as session:
        model = session.get(Model, model_id, with_for_update=ctx.db.dialect == "postgresql")
        if model is None or (
            model.owner_id != principal.account_id and not principal.acts_as_admin
        ):
            raise NotFoundError(f"you have no model {model_id}")
        changed = model.retired_at is None
        if changed:
            model.retired_at = ctx.now()
            model.active = False
        session.flush()
    if changed and ctx.boards is not None:  # the pages' kept boards: off them at once
        ctx.boards.clear()
    return Retired(model, changed)


@dataclass(frozen=True)
class OwnedModel:
    """One of the caller's models, with where it stands."""

    model: Model
    status: ModelStatus
    """``retired``, else ``paused``, else ``ranked`` (a score on an active benchmark),
    else ``disputed`` (no score, a task DISPUTED), else ``pending`` (its first tasks)."""
    tasks_done: int
    tasks_disputed: int
    """DISPUTED: final after the last round, or requeued to fresh runners."""
    tasks_open: int
    """Not finalized yet."""
    aggregate_complete: bool
    """It has a score on every active benchmark (a rank on the aggregate board)."""


def owned_models(ctx: ServerContext, principal: Principal) -> list[OwnedModel]:
    """The caller's account's models, newest first, each with its status."""
    with ctx.db.read() as session:
        models = list(
            session.scalars(
                select(Model)
                .where(Model.owner_id == principal.account_id)
                .order_by(Model.id.desc())
            )
        )
        ids = [m.id for m in models]
        counts: dict[tuple[int, str], int] = {}
        for model_id, task_status, finalized, n in session.execute(
            select(Task.model_id, Task.status, Task.finalized_at.is_not(None), func.count())
            # edge tasks are measured, not scored: never a "disputed" or "done" evaluation
            .where(Task.model_id.in_(ids), Task.purpose != TASK_EDGE)
            .group_by(Task.model_id, Task.status, Task.finalized_at.is_not(None))
        ):
            for key in (str(task_status), "final" if finalized else "open"):
                counts[model_id, key] = counts.get((model_id, key), 0) + n
        scored = set(
            session.scalars(
                select(LeaderboardEntry.model_id).where(LeaderboardEntry.model_id.in_(ids))
            )
        )
        complete = set(
            session.scalars(
                select(LeaderboardAggregate.model_id).where(
                    LeaderboardAggregate.model_id.in_(ids), LeaderboardAggregate.complete == true()
                )
            )
        )
    out = []
    for m in models:
        done = counts.get((m.id, str(TaskStatus.DONE)), 0)
        disputed = counts.get((m.id, str(TaskStatus.DISPUTED)), 0)
        status: ModelStatus
        if m.retired_at is not None:
            status = "retired"
        elif m.paused_at is not None:
            status = "paused"
        elif m.id in scored:
            status = "ranked"
        elif disputed:
            status = "disputed"
        else:
            status = "pending"
        out.append(
            OwnedModel(m, status, done, disputed, counts.get((m.id, "open"), 0), m.id in complete)
        )
    return out
