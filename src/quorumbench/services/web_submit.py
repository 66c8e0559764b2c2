"""The site's submission and retire forms, over the services every door uses.

:func:`register_once` registers what the ``/submit`` form confirms through
:func:`~quorumbench.services.submissions.register_submission` (the one validation of
every door), once per form: the form's one-time nonce is recorded in ``web_form_uses``
in the transaction that adds the model, so the same form posted again (a double
click, the back button, two tabs racing) finds that row and answers with the same
model, never a duplicate or an error. :func:`own_model` is the model a retire form is
about: the signed-in account's own, else NotFoundError (as ``retire_model`` answers).
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from quorumbench.db.models import Model
from quorumbench.db.session_models import WebFormUse
from quorumbench.errors import ConflictError, NotFoundError
from quorumbench.services.context import ServerContext
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch
from quorumbench.services.submissions import Submission, register_submission
from quorumbench.services.web_sessions import SignedIn, _checked_nonce

MODEL_REGISTER = "model:register"
"""``web_form_uses.action`` of the form that registers a model."""


class FormRegistration(NamedTuple):
    model_id: int
    name: str
    created: bool
    """False: this form (or this account, with this pinned ref) registered it before."""


def _earlier(ctx: ServerContext, signed_in: SignedIn, nonce: str) -> WebFormUse | None:
    with ctx.db.read() as session:
        found: WebFormUse | None = session.scalars(
            select(WebFormUse).where(
                WebFormUse.session_id == signed_in.id, WebFormUse.nonce == nonce
            )
        ).first()
    return found


def _answer_earlier(ctx: ServerContext, use: WebFormUse) -> FormRegistration:
    if use.action != MODEL_REGISTER or use.result_id is None:
        raise ConflictError("this form was used for something else already")
    with ctx.db.read() as session:
        model = session.get(Model, use.result_id)
        if model is None:
            raise NotFoundError("the model this form registered is gone")
        return FormRegistration(model.id, model.name, created=False)


def register_once(
    ctx: ServerContext, signed_in: SignedIn, nonce: str | None, submission: Submission
) -> FormRegistration:
    """Register ``submission`` for the signed-in account, once per form ``nonce`` (see
    the module docstring). A refusal raises the submission's error, report attached,
    and records nothing: the form may be corrected and posted again."""
    form = _checked_nonce(nonce)
    earlier = _earlier(ctx, signed_in, form)
    if earlier is not None:
        return _answer_earlier(ctx, earlier)

    def record(session: Session, model: Model) -> None:
        session.add(
            WebFormUse(
                session_id=signed_in.id,
                nonce=form,
                action=MODEL_REGISTER,
                result_id=model.id,
                created_at=ctx.now(),
            )
        )

    done = register_submission(ctx, signed_in.principal, submission, record=record)
    if done.created:
        schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))  # its first tasks, this epoch
    return FormRegistration(done.model.id, done.model.name, done.created)


def own_model(ctx: ServerContext, signed_in: SignedIn, model_id: int) -> Model:
    """The signed-in account's model ``model_id``; anyone else's is not found (but by
    an admin session, which may retire any, as ``retire_model`` allows)."""
    with ctx.db.read() as session:
        model = session.get(Model, model_id)
    mine = model is not None and model.owner_id == signed_in.account_id
    if model is None or not (mine or signed_in.principal.acts_as_admin):
        raise NotFoundError(f"you have no model {model_id}")
    return model
