"""The runner's HTTP client for the server's ``/v0`` API.

Transient failures (connection errors, timeouts, 5xx, 429) are retried a bounded
number of times with exponential backoff, once the server has answered this client
at least once: until then a failure is reported after one attempt, so a wrong URL or
a server that is not running says so at once instead of after minutes of backoff.
Problem documents (RFC 9457) become the matching :mod:`quorumbench.errors` class
carrying the server's ``detail``. The token is sent only in the ``Authorization``
header; it never appears in a repr, a log line or an error message.

Every body is a type of the wire protocol (``quorumbench/protocol.py``), sent with
this runner's ``protocol_version``; a server that no longer accepts it answers 426,
which becomes :class:`~quorumbench.errors.UnsupportedProtocolError` (never retried: the
runner stops and says how to upgrade). An answer that is not the protocol's is a
:class:`~quorumbench.errors.ConfigError` naming the endpoint.

A submission is encoded to bytes once per :meth:`ServerClient.submit` call and every
retry resends those bytes: the server treats a repeated identical payload under the
same lease as a duplicate, so a lost response can never count a result twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, SecretStr, ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from quorumbench import __version__, errors
from quorumbench.core.canonical import canonical_json
from quorumbench.errors import ServerUnavailableError, UnsupportedProtocolError
from quorumbench.protocol import (
    ENGINE_SINCE,
    PROTOCOL_VERSION,
    EdgeReport,
    EdgeSubmission,
    Engine,
    FailureReport,
    Heartbeat,
    HeartbeatAck,
    LeaseGrant,
    LeaseRequest,
    Receipt,
    ResultPayload,
    ResultSignature,
    Submission,
    Task,
    speaks,
)
from quorumbench.runner.keys import RunnerKey

log = logging.getLogger("quorumbench.runner")

_BY_STATUS: dict[int, type[errors.QuorumError]] = {
    401: errors.AuthenticationError,
    403: errors.PermissionDeniedError,
    404: errors.NotFoundError,
    409: errors.LeaseExpiredError,
    422: errors.InvalidSubmissionError,
    429: errors.RateLimitedError,
    426: errors.UnsupportedProtocolError,
}
_BY_CODE: dict[str, type[errors.QuorumError]] = {
    cls.code: cls
    for cls in (
        errors.AuthenticationError,
        errors.PermissionDeniedError,
        errors.NotFoundError,
        errors.ConflictError,
        errors.LeaseExpiredError,
        errors.InvalidSubmissionError,
        errors.RateLimitedError,
        errors.ConfigError,
        errors.UnknownBenchmarkError,
        errors.SignatureError,
        errors.UnsupportedProtocolError,
    )
}
"""Problem ``type`` codes the runner can act on; others fall back to ``_BY_STATUS``."""


class _Retryable(Exception):
    """A response worth trying again (5xx, 429); turned into ServerUnavailableError."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


@dataclass(frozen=True)
class Lease:
    """A leased task slot: the task, and the fencing token (id, attempt) to act under."""

    lease_id: int
    attempt: int
    expires_at: datetime
    task: Task
    ttl_s: float
    """Seconds the lease had left when the server answered (by the server's clock)."""

    @property
    def task_id(self) -> int:
        return self.task.id


@dataclass(frozen=True)
class Identity:
    """``GET /v0/me``: the account behind the credential, and what the credential may do."""

    account_id: int
    account: str
    is_admin: bool
    scopes: frozenset[str]

    def grants(self, scope: str) -> bool:
        """Whether the credential carries ``scope`` (``admin`` carries every scope)."""
        return scope in self.scopes or "admin" in self.scopes


MIN_ATTEMPT_S = 1.0
"""The shortest wait for an answer when a deadline is near (a heartbeat's last tries)."""


def _until(wait: Callable[[RetryCallState], float], until: float) -> Callable[..., float]:
    """``wait``, cut so that no pause between attempts runs past ``until``."""

    def bounded(state: RetryCallState) -> float:
        return max(0.0, min(wait(state), until - time.monotonic()))

    return bounded


def _remaining(expires_at: datetime, response: httpx.Response) -> float:
    """Seconds until ``expires_at``, measured on the server's clock when it said so."""
    now = datetime.now(UTC)
    date = response.headers.get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError):
            now = parsedate_to_datetime(date)
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    return max((expires_at - now).total_seconds(), 0.0)


def _problem(response: httpx.Response) -> errors.QuorumError:
    """The error class and message a 4xx answer stands for."""
    detail = response.reason_phrase or "request failed"
    code = ""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = str(body.get("detail") or body.get("title") or detail)
        code = str(body.get("type", "")).rpartition("/")[2]
    cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code, errors.QuorumError)
    if cls is UnsupportedProtocolError:
        fields = body if isinstance(body, dict) else {}
        return UnsupportedProtocolError(
            detail,
            str(fields.get("protocol_version", "")),
            str(fields.get("accepted_versions", "")),
        )
    if cls is errors.QuorumError:
        return errors.QuorumError(f"server answered {response.status_code}: {detail}")
    return cls(detail)


class ServerClient:
    """Talks to one server as one named runner of the token's account."""

    def __init__(
        self,
        base_url: str,
        token: SecretStr,
        runner: str,
        *,
        timeout_s: float = 30.0,
        max_attempts: int = 5,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        key: RunnerKey | None = None,
        reached: bool = False,
        protocol_version: str = PROTOCOL_VERSION,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.runner = runner
        self.key = key
        """Signs every submission; the server refuses unsigned results."""
        self.reached = reached
        """Whether the server has answered this client (until then: one attempt, no retry)."""
        self.protocol_version = protocol_version
        self.engines: tuple[Engine, ...] | None = None
        """The engines a pull lists (protocol 1.3); None lists none (a runner before 1.3)."""
        """The wire protocol this runner speaks (sent with every pull and submission)."""
        self._token = token
        self._max_attempts = max(1, max_attempts)
        self._pull_key: str | None = None
        """The key of a pull whose outcome is unknown (it failed with no answer)."""
        self._wait = wait_exponential(multiplier=backoff_initial_s, max=backoff_max_s)
        self._sleep = sleep
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {token.get_secret_value()}",
                "User-Agent": f"quorumbench-runner/{__version__}",
                "Accept": "application/json",
            },
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"ServerClient(base_url={self.base_url!r}, runner={self.runner!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport -------------------------------------------------------------------

    def _send_once(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
        until: float | None = None,
    ) -> httpx.Response:
        headers = {"Content-Type": "application/json"} if content is not None else None
        extra: dict[str, Any] = {}
        if until is not None:  # no attempt may outlast the caller's deadline
            extra["timeout"] = max(MIN_ATTEMPT_S, min(self._timeout_s, until - time.monotonic()))
        response = self._http.request(
            method, path, params=params, content=content, headers=headers, **extra
        )
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retryable(response)
        self.reached = True
        return response

    def _cause(self, exc: Exception) -> str:
        """What went wrong, for one line: the exception's class and text, token redacted."""
        text = str(exc).replace(self._token.get_secret_value(), "***")
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        within_s: float | None = None,
    ) -> httpx.Response:
        """Send with bounded retries; raise the QuorumError a failure stands for.

        ``within_s``: instead of a number of attempts, retry for that many seconds, no
        attempt waiting for an answer past them (a heartbeat tries until its lease's
        deadline)."""
        if not self.reached:
            return self._first_contact(method, path, params, content)
        until = None if within_s is None else time.monotonic() + within_s
        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, httpx.TransportError | _Retryable)),
            stop=(
                stop_after_attempt(self._max_attempts)
                if within_s is None
                else stop_after_delay(within_s)
            ),
            wait=self._wait if until is None else _until(self._wait, until),
            sleep=self._sleep,
            before_sleep=lambda state: log.warning(
                "%s %s failed (%s); retrying", method, path, _describe(state.outcome)
            ),
            reraise=True,
        )
        try:
            response = retrying(self._send_once, method, path, params, content, until)
        except _Retryable as exc:
            if exc.response.status_code == 429:
                raise _problem(exc.response) from None
            raise ServerUnavailableError(
                f"{self.base_url} answered {exc.response.status_code} to {method} {path} "
                + (f"{self._max_attempts} times" if within_s is None else f"for {within_s:.0f} s"),
                exc.response.status_code,
            ) from None
        except httpx.TransportError as exc:
            raise ServerUnavailableError(
                f"cannot reach {self.base_url} ({type(exc).__name__}) "
                + (
                    f"after {self._max_attempts} attempts"
                    if within_s is None
                    else f"for {within_s:.0f} s"
                )
            ) from None
        if response.status_code >= 400:
            raise _problem(response)
        return response

    def _first_contact(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
    ) -> httpx.Response:
        """One attempt: a server never reached is more likely wrong than restarting."""
        try:
            response = self._send_once(method, path, params, content)
        except _Retryable as exc:
            if exc.response.status_code == 429:
                raise _problem(exc.response) from None
            raise ServerUnavailableError(
                f"{self.base_url} answered {exc.response.status_code} to {method} {path}",
                exc.response.status_code,
            ) from None
        except httpx.TransportError as exc:
            raise ServerUnavailableError(
                f"cannot reach {self.base_url} ({self._cause(exc)})"
            ) from None
        if response.status_code >= 400:
            raise _problem(response)
        return response

    # -- API -------------------------------------------------------------------------

    def pull(self) -> Lease | None:
        """Lease one task, or None when the server has no work for this runner."""
        # One key for this pull and all its retries: the server answers a repeated key
        # with the lease it already made, so a lost response never strands a slot. A
        # pull that got no answer at all keeps its key for the next call, which may
        # be answered with the lease the server made for it.
        key = self._pull_key or uuid.uuid4().hex
        self._pull_key = key
        engines = self.engines if speaks(self.protocol_version, ENGINE_SINCE) else None
        request = LeaseRequest(
            protocol_version=self.protocol_version,
            runner=self.runner,
            pull_key=key,
            engines=None if engines is None else list(engines),
        )
        content = _encode(request)
        try:
            response = self._request("POST", "/v0/leases", content=content)
        except ServerUnavailableError:
            raise
        except BaseException:
            self._pull_key = None  # a definite answer (4xx): the next pull is a new one
            raise
        self._pull_key = None
        if response.status_code == 204:
            return None
        grant = _parse(LeaseGrant, response, "POST /v0/leases")
        return Lease(
            lease_id=grant.lease_id,
            attempt=grant.attempt,
            expires_at=grant.expires_at,
            task=grant.task,
            ttl_s=_remaining(grant.expires_at, response),
        )

    def heartbeat(self, lease: Lease, within_s: float | None = None) -> Lease:
        """Extend ``lease``; the lease with its new expiry. LeaseExpiredError when lost.

        ``within_s``: retry for that long (the time the lease has left) rather than a
        number of attempts, none waiting past it: a slow answer must not outlive the
        lease it was to extend."""
        path = f"/v0/leases/{lease.lease_id}/heartbeat"
        response = self._request(
            "POST",
            path,
            params={"runner": self.runner},
            content=_encode(Heartbeat(attempt=lease.attempt)),
            within_s=within_s,
        )
        expires_at = _parse(HeartbeatAck, response, f"POST {path}").expires_at
        return replace(lease, expires_at=expires_at, ttl_s=_remaining(expires_at, response))

    def release(self, lease: Lease) -> None:
        """Give the lease back at once so another runner can take the slot."""
        self._request(
            "DELETE",
            f"/v0/leases/{lease.lease_id}",
            params={"attempt": lease.attempt, "runner": self.runner},
        )

    def fail(self, lease: Lease, reason: str) -> None:
        """Report that this runner could not evaluate the task; the slot goes to others."""
        self._request(
            "POST",
            f"/v0/leases/{lease.lease_id}/failure",
            params={"runner": self.runner},
            content=_encode(FailureReport(attempt=lease.attempt, reason=reason[:500] or "failed")),
        )

    def submit(self, lease: Lease, payload: ResultPayload) -> Receipt:
        """Submit the result of ``lease``, signed; retries resend the identical bytes."""
        if self.key is None:
            raise errors.ConfigError(
                "this runner has no signing key: run `quorumbench runner init`"
            )
        signature = self.key.sign_result(lease.task, lease.lease_id, lease.attempt, payload)
        content = encode_submission(lease, payload, signature, self.protocol_version)
        path = f"/v0/leases/{lease.lease_id}/result"
        response = self._request("POST", path, params={"runner": self.runner}, content=content)
        return _parse(Receipt, response, f"POST {path}")

    def submit_edge(self, lease: Lease, report: EdgeReport) -> Receipt:
        """Submit the report of an edge ``lease``, signed; retries resend the same bytes."""
        if self.key is None:
            raise errors.ConfigError(
                "this runner has no signing key: run `quorumbench runner init`"
            )
        signature = self.key.sign_result(lease.task, lease.lease_id, lease.attempt, report)
        body = EdgeSubmission(
            protocol_version=self.protocol_version,
            attempt=lease.attempt,
            result=report,
            signature=signature,
        )
        path = f"/v0/leases/{lease.lease_id}/edge"
        response = self._request(
            "POST", path, params={"runner": self.runner}, content=_encode(body)
        )
        return _parse(Receipt, response, f"POST {path}")

    def me(self) -> Identity:
        """The account behind the token and the token's scopes (``GET /v0/me``)."""
        body = self._request("GET", "/v0/me").json()
        return Identity(
            account_id=int(body["account_id"]),
            account=str(body["name"]),
            is_admin=bool(body["is_admin"]),
            scopes=frozenset(str(s) for s in body["scopes"]),
        )

    def runner_keys(self) -> list[dict[str, Any]]:
        """This runner's keys, revoked ones included; NotFoundError for a runner name
        the account never used."""
        keys: list[dict[str, Any]] = self._request("GET", f"/v0/runners/{self.runner}/keys").json()
        return keys

    def register_key(self, key: RunnerKey) -> dict[str, Any]:
        """Register ``key`` as this runner's signing key (the server revokes older ones)."""
        content = json.dumps({"public_key": key.public_hex}).encode()
        response = self._request("POST", f"/v0/runners/{self.runner}/keys", content=content)
        answer: dict[str, Any] = response.json()
        return answer

    def leaderboard(self, benchmark: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Leaderboard rows (the aggregate when ``benchmark`` is None)."""
        params: dict[str, Any] = {"limit": limit, "format": "json"}
        if benchmark is not None:
            params["benchmark"] = benchmark
        rows: list[dict[str, Any]] = self._request("GET", "/v0/leaderboard", params=params).json()[
            "rows"
        ]
        return rows


def encode_submission(
    lease: Lease,
    payload: ResultPayload,
    signature: ResultSignature,
    protocol_version: str = PROTOCOL_VERSION,
) -> bytes:
    """The request body of a submission: canonical JSON, NaN refused."""
    submission = Submission(
        protocol_version=protocol_version,
        attempt=lease.attempt,
        result=payload,
        signature=signature,
    )
    return _encode(submission)


def _encode(body: BaseModel) -> bytes:
    """A protocol body as canonical JSON (NaN and infinity refused)."""
    return canonical_json(body.model_dump(mode="json"))


Body = TypeVar("Body", bound=BaseModel)


def _parse(kind: type[Body], response: httpx.Response, what: str) -> Body:
    """The server's answer as the protocol type ``kind``; a ConfigError if it is not."""
    try:
        return kind.model_validate_json(response.content)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise errors.ConfigError(
            f"the server's answer to {what} is not protocol {PROTOCOL_VERSION}'s "
            f"{kind.__name__} ({where}: {first['msg']}): is it a QuorumBench server of a "
            "compatible version?"
        ) from None


def _describe(outcome: Any) -> str:
    exc = outcome.exception() if outcome is not None else None
    if isinstance(exc, _Retryable):
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__ if exc is not None else "unknown"
