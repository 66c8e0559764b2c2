"""The site's create-pool form, once per form (as ``services/web_submit.py`` registers).

The form carries a one-time nonce (``web_sessions.new_nonce``); the first post
creates the pool and records the nonce in ``web_form_uses`` in the same transaction
(:func:`~quorumbench.services.pools.create_pool`'s ``record``). A second post of that
form (a double click, the back button, a retried request) creates nothing and moves no
credits: it answers the pool the first post made. A refused post records nothing, so
the corrected form may be posted again.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from quorumbench.db.session_models import WebFormUse
from quorumbench.errors import ConflictError
from quorumbench.services.context import ServerContext
from quorumbench.services.pool_spec import PoolSpec
from quorumbench.services.pools import create_pool
from quorumbench.services.web_sessions import SignedIn, _checked_nonce

POOL_CREATE = "pool:create"
"""``web_form_uses.action`` of the form that creates a pool."""


def _earlier(ctx: ServerContext, signed_in: SignedIn, nonce: str) -> int | None:
    """The pool this form made before (None: it made none)."""
    with ctx.db.read() as session:
        use = session.scalars(
            select(WebFormUse).where(
                WebFormUse.session_id == signed_in.id, WebFormUse.nonce == nonce
            )
        ).first()
    if use is None:
        return None
    if use.action != POOL_CREATE or use.result_id is None:
        raise ConflictError("this form was used for something else already")
    return use.result_id


def create_pool_once(
    ctx: ServerContext, signed_in: SignedIn, nonce: str | None, spec: PoolSpec
) -> int:
    """The id of the pool this form makes: created on its first post, the same one on
    any later post of it (module docstring)."""
    form = _checked_nonce(nonce)
    earlier = _earlier(ctx, signed_in, form)
    if earlier is not None:
        return earlier

    def record(session: Session, pool_id: int) -> None:
        session.add(
            WebFormUse(
                session_id=signed_in.id,
                nonce=form,
                action=POOL_CREATE,
                result_id=pool_id,
                created_at=ctx.now(),
            )
        )
        session.flush()  # a concurrent second post stops here (unique key): rolled back

    try:
        return create_pool(ctx, signed_in.principal, spec, record=record).id
    except IntegrityError:
        earlier = _earlier(ctx, signed_in, form)
        if earlier is None:
            raise
        return earlier
