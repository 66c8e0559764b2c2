"""Submitting a model on the site: ``/submit``, its preview and its confirmation, and
retiring one's own model from ``/account``.

``/submit`` shows a form (signed out: a link to sign in) above the instructions for
runners and API users. ``POST /submit/preview`` (the session's CSRF token) answers the
form again with the validation report in place: findings, the metadata read, the
quota, the cost estimate, a duplicate; it never registers. Without an error the
report carries a **Register** form (CSRF token and a one-time nonce) that posts the
pinned ref to ``POST /submit/register``, which registers it once
(``services/web_submit.py``) and redirects (303) to ``/account``; a refusal is shown
in place with the values kept. Both count against ``QB_SUBMISSION_RATE_LIMIT`` like
the API's validate and register (each one reads the Hub). The work runs in the thread
pool (these are plain ``def`` routes), never on the event loop.

``GET /account/models/{id}/retire`` asks for confirmation; its POST form (CSRF
token) retires the model through ``services/models.retire_model``. Another account's
model is 404 either way.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import RedirectResponse, Response

from quorumbench.errors import QuorumError
from quorumbench.services import web_sessions, web_submit
from quorumbench.services.models import retire_model
from quorumbench.services.ratelimit import count_submission, count_write
from quorumbench.services.submissions import Submission, SubmissionReport, validate_submission
from quorumbench.services.web_sessions import SignedIn
from quorumbench.web.routes import html_page, page_html
from quorumbench.web.session import (
    Form,
    PostedForm,
    context,
    lookup,
    require_signed_in,
)
from quorumbench.web.signin import PRIVATE

router = APIRouter(include_in_schema=False)
REF_MAX, NAME_MAX = 512, 256
SCHEMES = ("hf:", "gguf:", "openai:", "bundled:")


def _values(form: Form) -> dict[str, str]:
    return {key: (form.one(key) or "").strip() for key in ("ref", "name", "family")}


def _problem(values: dict[str, str]) -> str | None:
    """What the form's fields lack before anything is read (the API's schema limits)."""
    ref = values["ref"]
    if not ref:
        return "Paste a model ref, e.g. hf:owner/name@main or hf:owner/name@<commit>."
    if len(ref) > REF_MAX:
        return f"The ref is longer than {REF_MAX} characters."
    if not ref.startswith(SCHEMES):
        return f"A ref starts with {', '.join(SCHEMES)} (e.g. hf:owner/name@main)."
    if len(values["name"]) > NAME_MAX or len(values["family"]) > NAME_MAX:
        return f"A name or family is at most {NAME_MAX} characters."
    return None


def _posted(request: Request, form: Form) -> tuple[SignedIn, dict[str, str], str | None]:
    """A posted form's session (CSRF checked), its values and what they lack; a form
    that lacks nothing counts against the submission rate limit (it reads the Hub)."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    values = _values(form)
    problem = _problem(values)
    if problem is None:
        count_submission(context(request), signed_in.principal)
    return signed_in, values, problem


def _submission(values: dict[str, str]) -> Submission:
    return Submission(values["ref"], values["name"] or None, values["family"] or None)


def _page(request: Request, status: int = 200, **extra: Any) -> Response:
    ctx = context(request)
    found = lookup(request)
    extra.setdefault("values", {"ref": "", "name": "", "family": ""})
    html = page_html(
        request,
        "submit.html",
        settings=ctx.settings,
        server_url=str(request.base_url).rstrip("/"),
        signed_in=found.session,
        active="submit",
        **extra,
    )
    headers = PRIVATE if found.session is not None else None
    return html_page(html, status_code=status, headers=headers)


@router.get("/submit")
def submit_page(request: Request) -> Response:
    """The form (signed in) or a link to sign in, and how to submit without the site."""
    return _page(request)


@router.post("/submit/preview")
def preview(request: Request, form: PostedForm) -> Response:
    """The validation report of the form's ref, in place; nothing is registered."""
    signed_in, values, problem = _posted(request, form)
    if problem is not None:
        return _page(request, 400, values=values, problem=problem)
    checked = validate_submission(context(request), signed_in.principal, _submission(values))
    return _page(
        request,
        values=values,
        report=checked.report,
        nonce=web_sessions.new_nonce() if checked.report.ok else None,
    )


@router.post("/submit/register")
def register(request: Request, form: PostedForm) -> Response:
    """Register the previewed (pinned) ref once per form; then ``/account``."""
    signed_in, values, problem = _posted(request, form)
    if problem is not None:
        return _page(request, 400, values=values, problem=problem)
    try:
        done = web_submit.register_once(
            context(request), signed_in, form.one("form"), _submission(values)
        )
    except QuorumError as exc:
        if not isinstance(exc.report, SubmissionReport):
            raise
        return _page(request, 422, values=values, report=exc.report, refused=exc.message)
    outcome = "registered" if done.created else "already"
    return RedirectResponse(f"/account?{outcome}={done.model_id}#models", status_code=303)


@router.get("/account/models/{model_id}/retire")
def confirm_retire(request: Request, model_id: Annotated[int, Path(ge=1)]) -> Response:
    """Ask before retiring: what it does, and the button that does it."""
    signed_in = require_signed_in(request)
    model = web_submit.own_model(context(request), signed_in, model_id)
    html = page_html(request, "retire.html", model=model, signed_in=signed_in, active="account")
    return html_page(html, headers=PRIVATE)


@router.post("/account/models/{model_id}/retire")
def retire(request: Request, model_id: Annotated[int, Path(ge=1)], form: PostedForm) -> Response:
    """Retire one of the account's models (another account's is not found)."""
    signed_in = require_signed_in(request)
    web_sessions.check_csrf(signed_in, form.one("csrf"))
    ctx = context(request)
    count_write(ctx, signed_in.principal)
    done = retire_model(ctx, signed_in.principal, model_id)
    return RedirectResponse(f"/account?retired={done.model.id}#models", status_code=303)
