"""The OpenAPI document says every answer an operation can give.

FastAPI documents what a route returns when it works, and a 422 with its own
validation body. Every error of this API is answered as ``application/problem+json``
instead (:mod:`quorumbench.api.problems`), so :class:`QuorumBenchAPI` completes the
document once, when it is first asked for: each operation under ``/v0`` declares the
problem responses it can give, with the ``Problem`` schema and the headers that
come with them.

An operation's problem statuses come from two places:

- what it is built from (read from FastAPI's dependency tree): 500 for every
  operation; 400 ``unknown-parameter`` for every one but the OAuth callback
  (:mod:`quorumbench.api.params`); 422 ``invalid-request`` where FastAPI validates
  parameters or a body; 400, 411 and 413 where it reads a body (one that is not
  JSON, one without a length, one too large: ``BodyLimit``); 401 where it needs a
  credential (:func:`~quorumbench.api.deps.get_bearer_token`, also declared as the
  ``bearer`` security scheme); 429 where it counts a write
  (:func:`~quorumbench.api.deps.get_writer`); 503 where it uses the server context
  (the database may be down);
- :data:`RAISES`: the errors its services raise on purpose, by operation. Their
  statuses come from :data:`~quorumbench.api.problems.STATUS`, the one map from
  error class to status; a test checks that every entry names an operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant

from quorumbench import errors
from quorumbench import errors as E  # short names for the table below
from quorumbench.api import deps
from quorumbench.api.params import OPEN_ROUTES
from quorumbench.api.problems import MEDIA_TYPE, Problem, status_of
from quorumbench.api.routing import route_contexts

API_PREFIX = "/v0"
PROBLEM_REF = "#/components/schemas/Problem"

_LEASE = (
    E.PermissionDeniedError,  # a token without task:pull, a suspended runner
    E.RateLimitedError,  # each call counts as a write
    E.NotFoundError,  # no such runner or lease for this account
    E.LeaseExpiredError,  # the lease expired, ended or is another attempt
    E.QueueUnavailableError,  # the queue (Redis) is down
)
RAISES: dict[str, tuple[type[errors.QuorumError], ...]] = {
    "POST /v0/auth/token": (
        E.AuthenticationError,
        E.PermissionDeniedError,  # scopes beyond what the credential grants
        E.ConfigError,  # an ID token whose identity cannot get an account
    ),
    "POST /v0/auth/refresh": (E.AuthenticationError,),
    "POST /v0/auth/revoke": (E.AuthenticationError,),
    "POST /v0/auth/dev-login": (E.NotFoundError, E.ConfigError, E.PermissionDeniedError),
    "GET /v0/auth/{provider}/login": (E.NotFoundError,),
    "GET /v0/auth/{provider}/callback": (
        E.NotFoundError,
        E.InvalidStateError,
        E.AuthenticationError,  # sent back without a code
        E.LoginDeniedError,
        E.ProviderError,
        E.ConfigError,
    ),
    "POST /v0/auth/{provider}/device": (E.NotFoundError, E.ProviderError),
    "POST /v0/auth/{provider}/device/token": (
        E.NotFoundError,
        E.InvalidStateError,
        E.AuthorizationPendingError,
        E.LoginExpiredError,
        E.LoginDeniedError,
        E.ProviderError,
        E.ConfigError,
    ),
    "POST /v0/models": (
        E.PermissionDeniedError,  # no model:register, or the quota is not earned
        E.RateLimitedError,  # registrations per week, submissions per minute
        E.DuplicateModelError,
        E.InvalidRefError,
        E.RegistrationError,
        E.ModelLoadError,  # an openai: endpoint on a private address
        E.MissingDependencyError,  # the server lacks huggingface_hub to read the Hub
    ),
    "POST /v0/submissions/validate": (
        E.PermissionDeniedError,  # no model:register
        E.RateLimitedError,  # submissions per minute
        E.MissingDependencyError,
    ),
    "GET /v0/models/{model_id}": (E.NotFoundError,),
    "POST /v0/models/{model_id}/retire": (E.PermissionDeniedError, E.NotFoundError),
    "GET /v0/me/account": (E.AuthenticationError,),  # the account is gone
    "POST /v0/tokens": (
        E.PermissionDeniedError,  # a scope the credential does not hold
        E.ConfigError,  # no scope at all
    ),
    "DELETE /v0/tokens/{token_id}": (E.PermissionDeniedError, E.NotFoundError),
    "GET /v0/models/{model_id}/failures": (E.PermissionDeniedError, E.NotFoundError),
    "POST /v0/models/{model_id}/resume": (E.PermissionDeniedError, E.NotFoundError),
    "POST /v0/leases": (*_LEASE, E.UnsupportedProtocolError),
    "POST /v0/leases/{lease_id}/heartbeat": _LEASE,
    "DELETE /v0/leases/{lease_id}": _LEASE,
    "POST /v0/leases/{lease_id}/failure": _LEASE,
    "POST /v0/leases/{lease_id}/result": (
        *_LEASE,
        E.UnsupportedProtocolError,  # a protocol version the server no longer accepts
        E.InvalidSubmissionError,  # a result that does not match its task, a bad signature
        E.ConflictError,  # another result of this runner for the task
    ),
    "POST /v0/leases/{lease_id}/edge": (
        *_LEASE,
        E.UnsupportedProtocolError,
        E.InvalidSubmissionError,  # a report whose figures do not follow, a scored lease
        E.ConflictError,  # another report of this runner for the task
    ),
    "GET /v0/leaderboard": (E.NotFoundError,),
    "GET /v0/tasks/{task_id}": (E.NotFoundError,),
    "GET /v0/epochs/{epoch_id}": (E.NotFoundError,),
    "GET /v0/log/head": (E.NotFoundError,),
    "GET /v0/log/proof/inclusion": (E.NotFoundError,),
    "GET /v0/log/proof/consistency": (E.NotFoundError,),
    "POST /v0/runners/{runner}/keys": (
        E.PermissionDeniedError,
        E.ConfigError,  # not an Ed25519 public key
        E.ConflictError,  # registered already
    ),
    "GET /v0/runners/{runner}/keys": (E.PermissionDeniedError, E.NotFoundError),
    "DELETE /v0/runners/{runner}/keys/{key_id}": (E.PermissionDeniedError, E.NotFoundError),
    "GET /v0/runner-keys/{key_id}": (E.NotFoundError,),
    "POST /v0/benchmarks": (
        E.PermissionDeniedError,  # no benchmark:create scope, or the account lacks it
        E.InvalidSpecError,  # code, an unknown pillar or label, a local data path
        E.DataError,  # unreachable, too large, a private URL, the hash, a bad row
        E.DuplicateBenchmarkError,
    ),
    "GET /v0/benchmarks/{name}": (E.NotFoundError,),
    "POST /v0/benchmarks/{name}/retire": (
        E.PermissionDeniedError,
        E.NotFoundError,  # no such benchmark, or another account's
        E.ConflictError,  # one of the server's own
    ),
    "POST /v0/accounts/{account}/grants": (
        E.PermissionDeniedError,  # not an admin
        E.NotFoundError,
        E.ConfigError,  # a reason that is not printable
    ),
    "POST /v0/asks": (
        E.AuthenticationError,  # endpoints or deepening without a signed-in account
        E.InvalidPlanError,  # a plan (or an endpoint URL) that is not valid
        E.RateLimitedError,  # writes, and asks with endpoints per account (QB_ASK_PER_ACCOUNT)
        E.ConfigError,  # this server evaluates no endpoints (QB_ASK_WORKERS=0)
        E.ServiceUnavailableError,  # the live pool is full or stopping
        E.NotFoundError,  # deepen: the plan selects no sample of this server's benchmarks
    ),
    "GET /v0/asks/{ask_id}": (E.AuthenticationError, E.NotFoundError),
    "GET /v0/asks/{ask_id}/board": (E.AuthenticationError, E.NotFoundError),
    "GET /v0/plans/{plan_id}": (E.NotFoundError,),
    "POST /v0/pools": (
        E.PermissionDeniedError,  # no model:register
        E.InsufficientFundsError,  # funds above the caller's balance
        E.UnknownBenchmarkError,  # a benchmark the server does not run
        E.InvalidSpecError,  # times or parameters the service refuses
        E.IdempotencyKeyReusedError,  # the Idempotency-Key came with another request
    ),
    "GET /v0/pools": (E.InvalidSpecError,),  # a phase the service does not know
    "GET /v0/pools/{pool_id}": (E.NotFoundError,),
    "POST /v0/pools/{pool_id}/entries": (
        E.PermissionDeniedError,  # no model:register, or someone else's model
        E.NotFoundError,  # no such pool or model
        E.ConflictError,  # joins closed, entries per account used up, not eligible
        E.DuplicateEntryError,  # the same weights entered already
    ),
    "POST /v0/pools/{pool_id}/cancel": (
        E.PermissionDeniedError,  # not an admin
        E.NotFoundError,
        E.InvalidSpecError,  # a reason the service refuses
        E.ConflictError,  # settled or cancelled already
    ),
    "POST /v0/pools/{pool_id}/reveal": (
        E.PermissionDeniedError,  # not the funder
        E.NotFoundError,
        E.ConflictError,  # no final split, revealed already, not ended, or too late
        E.InvalidSpecError,  # a bad spec, or data.sha256 is not the commitment
        E.DataError,  # unreachable, too large, a private URL, the hash, a bad row
    ),
    "POST /v0/ledger/mint": (  # admins; the account; the Idempotency-Key's request
        E.PermissionDeniedError,
        E.NotFoundError,
        E.IdempotencyKeyReusedError,
    ),
    "GET /v0/ledger/check": (E.PermissionDeniedError,),  # admins only
}
"""The errors each operation's services raise on purpose (``METHOD /path``)."""

_MODEL_ID = {"model_id": "$response.body#/id"}
_TOKEN_ID = {"token_id": "$response.body#/id"}
_LEASE_ID = {"lease_id": "$response.body#/lease_id"}
_KEY = {"runner": "$request.path.runner", "key_id": "$response.body#/key_id"}
LINKS: dict[tuple[str, str], dict[str, dict[str, str]]] = {
    ("POST /v0/models", "201"): {
        "GET /v0/models/{model_id}": _MODEL_ID,
        "GET /v0/models/{model_id}/failures": _MODEL_ID,
        "POST /v0/models/{model_id}/resume": _MODEL_ID,
        "POST /v0/models/{model_id}/retire": _MODEL_ID,
    },
    ("POST /v0/pools", "201"): {
        "GET /v0/pools/{pool_id}": {"pool_id": "$response.body#/id"},
        "POST /v0/pools/{pool_id}/entries": {"pool_id": "$response.body#/id"},
        "POST /v0/pools/{pool_id}/cancel": {"pool_id": "$response.body#/id"},
        "POST /v0/pools/{pool_id}/reveal": {"pool_id": "$response.body#/id"},
    },
    ("POST /v0/tokens", "201"): {"DELETE /v0/tokens/{token_id}": _TOKEN_ID},
    ("POST /v0/asks", "201"): {
        "GET /v0/asks/{ask_id}": {"ask_id": "$response.body#/id"},
        "GET /v0/asks/{ask_id}/board": {"ask_id": "$response.body#/id"},
        "GET /v0/plans/{plan_id}": {"plan_id": "$response.body#/plan_id"},
    },
    ("POST /v0/leases", "201"): {
        "POST /v0/leases/{lease_id}/heartbeat": _LEASE_ID,
        "DELETE /v0/leases/{lease_id}": {**_LEASE_ID, "attempt": "$response.body#/attempt"},
        "POST /v0/leases/{lease_id}/failure": _LEASE_ID,
        "POST /v0/leases/{lease_id}/result": _LEASE_ID,
        "POST /v0/leases/{lease_id}/edge": _LEASE_ID,
        "GET /v0/tasks/{task_id}": {"task_id": "$response.body#/task/id"},
    },
    ("POST /v0/runners/{runner}/keys", "201"): {
        "GET /v0/runners/{runner}/keys": {"runner": "$request.path.runner"},
        "DELETE /v0/runners/{runner}/keys/{key_id}": _KEY,
        "GET /v0/runner-keys/{key_id}": {"key_id": "$response.body#/key_id"},
    },
}
"""OpenAPI links: what a created model, lease or key leads to, and with which ids
(``(METHOD /path, status)`` of the answer -> ``METHOD /path`` -> parameters)."""

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "``Bearer``: send an API token or an access JWT.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait, when waiting will help.",
            "schema": {"type": "string"},
        }
    },
    426: {
        "Upgrade": {
            "description": "``quorumbench-runner/<version>``: the protocol to upgrade to.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    428: {
        "Retry-After": {
            "description": "Seconds to wait before polling again.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    503: {
        "Retry-After": {
            "description": "Seconds to wait before trying again.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
}


class QuorumBenchAPI(FastAPI):
    """FastAPI whose OpenAPI document declares every problem response (see above)."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            declare_problems(super().openapi(), self)
        assert self.openapi_schema is not None
        return self.openapi_schema


def declare_problems(schema: dict[str, Any], app: FastAPI) -> None:
    """Add the problem responses of every operation under ``/v0`` to ``schema``."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    for name, method, path, dependant in _operations(app):
        operation = schema["paths"][path][method.lower()]
        responses = operation.setdefault("responses", {})
        validates = "422" in responses  # FastAPI validates parameters or a body
        statuses = problem_statuses(name, method, path, dependant, validates=validates)
        for status, codes in sorted(statuses.items()):
            response = responses.setdefault(str(status), {})
            if status == 422:  # FastAPI's own validation body: never sent
                response.pop("content", None)
            response["description"] = _description(status, codes, response.get("description"))
            response.setdefault("content", {})[MEDIA_TYPE] = {"schema": {"$ref": PROBLEM_REF}}
            if status in _HEADERS:
                response["headers"] = {**_HEADERS[status], **response.get("headers", {})}
        operation["responses"] = dict(sorted(responses.items()))
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    declare_links(schema)


def declare_links(schema: dict[str, Any]) -> None:
    """Add :data:`LINKS` to the answers they start from, named after the operation they
    lead to (its ``operationId``)."""
    ids = {
        f"{method.upper()} {path}": operation["operationId"]
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "operationId" in operation
    }
    for (source, status), targets in LINKS.items():
        method, path = source.split(" ", 1)
        response = schema["paths"][path][method.lower()]["responses"][status]
        links = response.setdefault("links", {})
        for target, parameters in targets.items():
            links[ids[target]] = {"operationId": ids[target], "parameters": parameters}


def problem_statuses(
    name: str, method: str, path: str, dependant: Dependant, *, validates: bool
) -> dict[int, list[str]]:
    """The problem statuses of the route ``name`` (``method path``), each with the
    problem codes behind it; ``validates`` when FastAPI validates its parameters."""
    found: dict[int, list[str]] = {500: ["internal-error"]}

    def add(status: int, code: str) -> None:
        found.setdefault(status, [])
        if code not in found[status]:
            found[status].append(code)

    calls = set(_calls(dependant))
    if name not in OPEN_ROUTES:
        add(400, "unknown-parameter")
    if validates:
        add(422, "invalid-request")
    if _reads_body(dependant):
        add(400, "http-error")
        add(411, "length-required")
        add(413, "body-too-large")
    if deps.get_bearer_token in calls:
        add(401, errors.AuthenticationError.code)
    if deps.get_writer in calls:
        add(429, errors.RateLimitedError.code)
    if deps.get_context in calls:
        add(503, errors.DatabaseUnavailableError.code)
    for cls in RAISES.get(f"{method} {path}", ()):
        add(status_of(cls), cls.code)
    return found


def _description(status: int, codes: list[str], given: str | None) -> str:
    problems = ", ".join(f"`/problems/{code}`" for code in codes)
    phrase = given if given and given != "Validation Error" else HTTPStatus(status).phrase
    return f"{phrase} (problem+json: {problems})"


def _operations(app: FastAPI) -> Iterator[tuple[str, str, str, Dependant]]:
    """(route name, method, path, dependency tree) of every documented operation
    under ``/v0``."""
    for route in route_contexts(app):
        path = route.path_format or ""
        dependant = getattr(route, "dependant", None)
        if not isinstance(dependant, Dependant) or not getattr(route, "include_in_schema", False):
            continue
        if path == API_PREFIX or path.startswith(f"{API_PREFIX}/"):
            for method in sorted(route.methods or ()):
                yield route.name or "", method, path, dependant


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def _reads_body(dependant: Dependant) -> bool:
    return bool(dependant.body_params) or any(_reads_body(s) for s in dependant.dependencies)
