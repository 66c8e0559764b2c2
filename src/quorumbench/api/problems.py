"""The one map from error classes to HTTP statuses, and problem+json responses.

Every QuorumError becomes ``application/problem+json`` with ``type``
(``/problems/<code>``), ``title``, ``status``, ``detail`` and ``instance``; request
validation errors too (with an ``errors`` list); anything else becomes a generic 500
that carries the request id while the traceback goes to the log only.

The web pages are for people, so three errors that reach a page get ``error.html``
instead: a query or path value the page's validation rejects (400, naming the
parameter and what it allows) unless the request asked for ``format=json`` or
``format=csv``; an unknown path outside the API that a browser asked for (404); and a
QuorumError a page raises (a form refused: not signed in, a forged CSRF token, a
token that is not the account's) when a browser asked for it (its ``Accept`` has
``text/html``), with the status of :data:`STATUS`, as is the end of a login the site
started (which the callback marks with :func:`show_errors_as_page`).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from quorumbench import errors, protocol
from quorumbench.api.routing import allowed_methods, route_path
from quorumbench.logs import event
from quorumbench.services.submissions import SubmissionReport
from quorumbench.web import pages
from quorumbench.web import routes as web

log = logging.getLogger("quorumbench.api")
MEDIA_TYPE = "application/problem+json"

STATUS: dict[type[errors.QuorumError], int] = {
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.IdempotencyKeyReusedError: 422,
    errors.AuthenticationError: 401,
    errors.PermissionDeniedError: 403,
    errors.RateLimitedError: 429,
    errors.InvalidSubmissionError: 422,
    errors.RegistrationError: 422,
    errors.InvalidRefError: 422,
    errors.DataError: 422,
    errors.InvalidSpecError: 422,
    errors.ModelLoadError: 422,
    errors.ConfigError: 400,
    errors.UnknownBenchmarkError: 400,
    errors.ServiceUnavailableError: 503,
    errors.InvalidStateError: 400,
    errors.AuthorizationPendingError: 428,
    errors.LoginExpiredError: 410,
    errors.ProviderError: 502,
    errors.UnsupportedProtocolError: 426,
}
RETRY_AFTER_S = 5
"""What a 503 tells clients to wait before trying again."""
NOT_PAGES = ("/v0", "/docs", "/redoc", "/openapi.json")
"""Paths that are not web pages: the JSON API and its documentation."""
MACHINE_FORMATS = ("json", "csv")


class ValidationIssue(BaseModel):
    """One invalid part of a request (``errors`` of ``/problems/invalid-request``)."""

    loc: list[str | int]
    msg: str
    type: str


def _member(description: str) -> Any:
    """An optional member of some problem types: absent from the others (never null)."""
    return Field(None, description=description, json_schema_extra=_no_default)


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class Problem(BaseModel):
    """Every error of the API, as :func:`problem` answers it (RFC 9457, documented in the
    OpenAPI schema by api/openapi.py); some problem types add members of their own."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="``/problems/<code>``: the error's stable code.")
    title: str
    status: int
    detail: str = Field(description="What went wrong, and what to do about it.")
    instance: str = Field(description="The path of the request.")
    errors: list[ValidationIssue] | SkipJsonSchema[None] = _member(
        "``invalid-request``: each invalid part of the request."
    )
    unknown: list[str] | SkipJsonSchema[None] = _member(
        "``unknown-parameter``: the query parameters the endpoint does not take."
    )
    allowed: list[str] | SkipJsonSchema[None] = _member(
        "``unknown-parameter``: the query parameters it takes."
    )
    request_id: str | SkipJsonSchema[None] = _member(
        "``internal-error``: the id under which the server logged the error."
    )
    existing_model_id: int | SkipJsonSchema[None] = _member(
        "``duplicate-model``: the model registered already."
    )
    accepted_evaluations: int | SkipJsonSchema[None] = _member(
        "``quota-not-earned``: the account's accepted evaluations."
    )
    evaluations_needed: int | SkipJsonSchema[None] = _member(
        "``quota-not-earned``: how many more it needs."
    )
    interval: int | SkipJsonSchema[None] = _member(
        "``authorization-pending``, ``slow-down``: seconds to wait between polls."
    )
    protocol_version: str | SkipJsonSchema[None] = _member(
        "``unsupported-protocol``: the runner's protocol version (docs/protocol.md)."
    )
    accepted_versions: str | SkipJsonSchema[None] = _member(
        "``unsupported-protocol``: the versions this server accepts, in words."
    )
    report: SubmissionReport | SkipJsonSchema[None] = _member(
        "A refused registration (``POST /v0/models``): every finding of its validation "
        "report, not only the first error, which ``type`` and ``detail`` give."
    )


def status_for(exc: errors.QuorumError) -> int:
    return status_of(type(exc))


def status_of(error: type[errors.QuorumError]) -> int:
    """The status of an error class: its nearest ancestor's in :data:`STATUS`, else 400."""
    for cls in error.__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def problem(
    request: Request,
    status: int,
    code: str,
    title: str,
    detail: str,
    retry_after: int | None = None,
    allow: list[str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        **extra,
    }
    if status != 500:  # an internal error is logged with its traceback instead
        event(
            log,
            "request.refused",
            level=logging.WARNING if status >= 500 else logging.INFO,
            status=status,
            code=code,
            detail=detail,
            method=request.method,
            path=request.url.path,
        )
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif status == 503:
        headers = {"Retry-After": str(retry_after or RETRY_AFTER_S)}
    elif status == 426:  # RFC 9110: name the protocol to upgrade to
        headers = {"Upgrade": f"quorumbench-runner/{protocol.PROTOCOL_VERSION}"}
    elif retry_after is not None:
        headers = {"Retry-After": str(retry_after)}
    elif allow is not None:
        headers = {"Allow": ", ".join(allow)}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _title(code: str) -> str:
    return code.replace("-", " ").capitalize()


async def quorum_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.QuorumError)
    if _browser(request) and (_page_for_people(request) or _marked_as_page(request)):
        page = await run_in_threadpool(web.error_page, status_for(exc), exc.message, request)
        if isinstance(exc, errors.RateLimitedError) and exc.retry_after is not None:
            page.headers["Retry-After"] = str(exc.retry_after)  # a form over its limit
        return page
    extra: dict[str, Any] = {}
    if isinstance(exc, errors.DuplicateModelError):
        extra["existing_model_id"] = exc.existing_id
    if isinstance(exc, errors.QuotaNotEarnedError):
        extra["accepted_evaluations"] = exc.accepted_evaluations
        extra["evaluations_needed"] = exc.evaluations_needed
    retry = exc.retry_after if isinstance(exc, errors.RateLimitedError) else None
    if isinstance(exc, errors.AuthorizationPendingError):
        extra["interval"] = retry = exc.interval
    if isinstance(exc, errors.UnsupportedProtocolError):
        extra["protocol_version"] = exc.version
        extra["accepted_versions"] = exc.accepted
    if isinstance(exc.report, SubmissionReport):
        extra["report"] = exc.report.model_dump(mode="json")
    return problem(
        request, status_for(exc), exc.code, _title(exc.code), exc.message, retry, **extra
    )


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (no such route, method not allowed, body too large)."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404 and _browser_outside_api(request):
        detail = f"There is no page at {request.url.path}."
        return await run_in_threadpool(web.error_page, 404, detail, request)
    code = {404: "not-found", 405: "method-not-allowed", 413: "body-too-large"}.get(
        exc.status_code, "http-error"
    )
    detail = str(exc.detail)
    allow = None
    if exc.status_code == 413:
        detail = "the request body is larger than this server accepts (QB_MAX_BODY_BYTES)"
    elif exc.status_code == 405:
        allow = allowed_methods(request.app, route_path(request.scope))
        detail = f"{request.method} is not served at {request.url.path}; use {', '.join(allow)}"
    return problem(request, exc.status_code, code, _title(code), detail, allow=allow)


async def validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if _page_for_people(request):
        detail = "; ".join(plain_error(e) for e in exc.errors())
        return await run_in_threadpool(web.error_page, 400, detail or "invalid request", request)
    details = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    summary = "; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in details)
    return problem(
        request,
        422,
        "invalid-request",
        "Invalid request",
        summary or "invalid request",
        errors=details,
    )


_PLAIN = {
    "greater_than_equal": "must be {ge} or more",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be {le} or less",
    "less_than": "must be less than {lt}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be 1 or 0 (true or false)",
    "literal_error": "must be {expected}",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "missing": "is required",
}


def plain_error(error: Any) -> str:
    """One validation error as ``parameter: what it allows``, e.g. ``page: must be 1 or
    more``: its ``loc`` without the ``query``/``path`` part, and its ``msg`` in plain
    words where its ``type`` is a familiar one (the ``msg`` itself otherwise)."""
    loc = [str(part) for part in error.get("loc", ()) if part not in ("query", "path")]
    msg = str(error.get("msg", ""))
    template = _PLAIN.get(str(error.get("type", "")))
    try:
        text = template.format(**error.get("ctx", {})) if template else msg
    except (KeyError, IndexError):
        text = msg
    return f"{'.'.join(loc)}: {text}" if loc else text


def _page_for_people(request: Request) -> bool:
    """The request matched a web page and did not ask for a machine format."""
    route = request.scope.get("route")
    endpoint = getattr(route, "endpoint", None)
    return (
        endpoint is not None and endpoint in pages.page_endpoints() and not _machine_format(request)
    )


def show_errors_as_page(request: Request) -> None:
    """Answer this request's QuorumErrors with the error page when a browser asked (for
    an API route that a person's browser reaches: the end of a login the site started)."""
    request.state.errors_as_page = True


def _marked_as_page(request: Request) -> bool:
    return bool(getattr(request.state, "errors_as_page", False))


def _browser(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _browser_outside_api(request: Request) -> bool:
    path = request.url.path
    outside = not any(path == p or path.startswith(f"{p}/") for p in NOT_PAGES)
    return outside and _browser(request) and not _machine_format(request)


def _machine_format(request: Request) -> bool:
    return request.query_params.get("format") in MACHINE_FORMATS


async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    request_id = uuid.uuid4().hex
    log.exception("unhandled error (request %s)", request_id, exc_info=exc)
    return problem(
        request,
        500,
        "internal-error",
        "Internal error",
        "the server failed; the error was logged",
        request_id=request_id,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.QuorumError, quorum_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected_error)


class BodyLimit:
    """ASGI middleware: a body whose Content-Length is over ``limit`` gets 413, as
    problem+json, before anything reads it; a body without a Content-Length (chunked)
    gets 411, so no body goes unmeasured."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length", b"")
            if not length and b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                response = problem(
                    Request(scope),
                    411,
                    "length-required",
                    _title("length-required"),
                    "send the request body with a Content-Length",
                )
                await response(scope, receive, send)
                return
            if length.isdigit() and int(length) > self.limit:
                detail = (
                    f"the request body has {int(length)} bytes; this server accepts at most "
                    f"{self.limit} (QB_MAX_BODY_BYTES)"
                )
                response = problem(
                    Request(scope), 413, "body-too-large", _title("body-too-large"), detail
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
