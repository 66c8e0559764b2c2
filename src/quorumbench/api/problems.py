"""The one map from error classes to HTTP statuses, and problem+json responses.

Every QuorumError becomes ``application/problem+json`` with ``type``
(``/problems/<code>``), ``title``, ``status``, ``detail`` and ``instance``; request
validation errors too (with an ``errors`` list); anything else becomes a generic 500
that carries the request id while the traceback goes to the log only.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from quorumbench import errors

log = logging.getLogger("quorumbench.api")
MEDIA_TYPE = "application/problem+json"

STATUS: dict[type[errors.QuorumError], int] = {
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.AuthenticationError: 401,
    errors.PermissionDeniedError: 403,
    errors.RateLimitedError: 429,
    errors.InvalidSubmissionError: 422,
    errors.RegistrationError: 422,
    errors.InvalidRefError: 422,
    errors.DataError: 422,
    errors.ModelLoadError: 422,
    errors.ConfigError: 400,
    errors.UnknownBenchmarkError: 400,
    errors.ServiceUnavailableError: 503,
}
RETRY_AFTER_S = 5
"""What a 503 tells clients to wait before trying again."""


def status_for(exc: errors.QuorumError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def problem(
    request: Request, status: int, code: str, title: str, detail: str, **extra: Any
) -> JSONResponse:
    body = {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        **extra,
    }
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _title(code: str) -> str:
    return code.replace("-", " ").capitalize()


async def quorum_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.QuorumError)
    extra: dict[str, Any] = {}
    if isinstance(exc, errors.DuplicateModelError):
        extra["existing_model_id"] = exc.existing_id
    return problem(request, status_for(exc), exc.code, _title(exc.code), exc.message, **extra)


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
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
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected_error)
