"""The QuorumBench exception tree.

Every error the package raises on purpose derives from :class:`QuorumError` and
carries a stable kebab-case ``code``. None of them knows about HTTP; the CLI turns
them into one line and exit status 1.

An error that a setting fixes carries a :class:`Hint`: the setting's name and the
advice in words that name no command-line flag or environment variable, because the
engine raising it serves ``quorumbench eval``, the runner and the server alike. Each
surface names its own way to change the setting: the CLI appends the command's flag
(``cli/app.py``), the runner the variables it reads (``runner/faults.py``).

```
QuorumError
├── ConfigError                 settings or flags that cannot work together
│   └── SandboxRequiredError    a code benchmark asked to score without a sandbox
├── InvalidRefError             a model reference that cannot be parsed or pinned
├── UnknownBenchmarkError       no benchmark registered under that name
├── UnknownBackendError         no backend registered under that name
├── InvalidSpecError            a custom benchmark spec that fails validation
│   ├── LocalDataPathError      a spec sent to the server that names a file on the sender's disk
│   └── InvalidPlanError        a plan (or an ask's endpoints) that is not valid
├── DataError                   benchmark data that cannot be used
│   ├── DataNotFoundError       the data file or directory is missing
│   ├── ChecksumMismatchError   the bytes do not hash to the pinned SHA-256
│   ├── DataUnreachableError    the data URL cannot be fetched
│   ├── DataTooLargeError       the data at the URL is over the size limit
│   ├── DataUrlNotAllowedError  a data URL on a loopback, private or other non-public address
│   └── InvalidLabelsError      a row whose rendered labels are not in the taxonomy
├── ModelLoadError              model files that cannot be loaded (or are refused)
│   └── EndpointNotAllowedError an openai: endpoint on a private or local address
├── BackendError                a backend failed while evaluating
│   ├── EndpointError           an OpenAI-compatible endpoint answered badly
│   ├── SandboxError            the sandboxed evaluation died, was killed or misbehaved
│   ├── CodeExecutorError       the sandbox that runs generated code could not run it
│   └── EvaluationTimeoutError  a task ran past the runner's time limit
├── MissingDependencyError      an optional package is not installed
├── NotFoundError               no such account, model, task, lease…
├── ConflictError               the request contradicts stored state
│   ├── DuplicateModelError     the model (ref or weights) is registered already
│   ├── DuplicateBenchmarkError the benchmark name (and version) is taken already
│   ├── InsufficientFundsError  a transfer larger than the holder's balance
│   ├── DuplicateEntryError     the same weights (or model) entered in a pool already
│   ├── IdempotencyKeyReusedError an Idempotency-Key used before for another request
│   └── LeaseExpiredError       the lease expired or was superseded (fencing)
├── AuthenticationError         no valid API token
├── PermissionDeniedError       the token lacks a scope, or the account may not act
│   ├── LoginDeniedError        the person declined the login at the provider
│   ├── CsrfError               a site form without its session's CSRF token (or a forged one)
│   └── QuotaNotEarnedError     registering needs more accepted evaluations ("earn your submit")
├── InvalidStateError           an OAuth callback whose state is unknown, spent or expired
├── AuthorizationPendingError   a device login not approved yet; poll again later
│   └── SlowDownError           … and poll less often
├── LoginExpiredError           a device login that was not approved in time
├── ProviderError               the login provider failed or answered badly
├── RateLimitedError            too many requests or registrations; wait (Retry-After)
├── InvalidSubmissionError      a result that does not match its task
├── UnsupportedProtocolError    a runner whose wire protocol the server no longer accepts
├── RegistrationError           a model that may not be registered (too large…)
└── ServiceUnavailableError     a service we depend on is down; try again later
    ├── DatabaseUnavailableError the database cannot be reached or used
    ├── QueueUnavailableError   the task queue (Redis) cannot be reached
    └── ServerUnavailableError  (runner side) the server cannot be reached
```
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hint:
    """What fixes an error: a setting to change, and the advice in neutral words."""

    setting: str
    """The setting's name as the options and settings spell it (``datasets_dir``,
    ``allow_pickle``, ``prompt_style``, ``samples``, ``batch_size``, ``device``)."""
    advice: str
    """What to do, naming no flag or variable ("give a datasets directory…")."""


class QuorumError(Exception):
    """Base class of every deliberate QuorumBench error.

    ``message`` is what is shown: ``reason``, then the hint's advice when there is one.
    """

    code = "quorum-error"

    def __init__(self, message: str, *, hint: Hint | None = None) -> None:
        shown = message if hint is None else f"{message}; {hint.advice}"
        super().__init__(shown)
        self.message = shown
        self.reason = message
        self.hint = hint
        self.report: object | None = None
        """What explains the refusal in full, when something made it (a submission's
        validation report, ``services/submissions``): the API adds it to the problem
        document as its ``report`` member."""


class ConfigError(QuorumError):
    code = "config-error"


class SandboxRequiredError(ConfigError):
    """A code benchmark (HumanEval, MBPP) was asked to score, or to build a request,
    without a code executor: generated code runs only in a sandbox (or where the
    sandbox was turned off on purpose)."""

    code = "sandbox-required"


class InvalidRefError(QuorumError):
    code = "invalid-ref"


class UnknownBenchmarkError(QuorumError):
    code = "unknown-benchmark"


class UnknownBackendError(QuorumError):
    code = "unknown-backend"


class InvalidSpecError(QuorumError):
    code = "invalid-spec"


class LocalDataPathError(InvalidSpecError):
    """A spec sent to the server whose data is a local ``path``: the server cannot read
    the sender's disk; the data must be at an HTTPS or ``hf://`` URL."""

    code = "local-data-path"


class InvalidPlanError(InvalidSpecError):
    """A plan document (``core/plans.py``), or an ask's endpoints, that is not valid."""

    code = "invalid-plan"


class DataError(QuorumError):
    code = "data-error"


class DataNotFoundError(DataError):
    code = "data-not-found"


class ChecksumMismatchError(DataError):
    code = "checksum-mismatch"


class DataUnreachableError(DataError):
    """The data URL could not be fetched (no answer, an error status, too many redirects)."""

    code = "data-unreachable"


class DataTooLargeError(DataError):
    """The data at a URL is larger than the limit (``benchmark_data_max_bytes``)."""

    code = "data-too-large"


class DataUrlNotAllowedError(DataError):
    """A data URL whose host is (or redirects to) a loopback, private, link-local,
    multicast, reserved or metadata address (server-side request forgery), unless the
    operator allows private URLs."""

    code = "url-not-allowed"


class InvalidLabelsError(DataError):
    """A row whose labels, rendered from the spec's placeholders, are not taxonomy v1."""

    code = "invalid-labels"


class ModelLoadError(QuorumError):
    code = "model-load-error"


class EndpointNotAllowedError(ModelLoadError):
    """An ``openai:`` endpoint that resolves to a loopback, private, link-local or
    metadata address (evaluation/endpoints.py)."""

    code = "endpoint-not-allowed"


class BackendError(QuorumError):
    code = "backend-error"


class EndpointError(BackendError):
    """An endpoint failed; ``status`` is the HTTP status when it answered with one."""

    code = "endpoint-error"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SandboxError(BackendError):
    """The runner's sandboxed worker failed: it died (a memory or process limit, a
    crash), was killed, or broke the protocol."""

    code = "sandbox-error"


class CodeExecutorError(BackendError):
    """The executor of generated code could not run a program (the sandbox did not
    start, a cgroup could not be made): this machine's fault, never the program's."""

    code = "code-executor-error"


class EvaluationTimeoutError(BackendError):
    code = "evaluation-timeout"


class MissingDependencyError(QuorumError):
    """An optional package is needed; ``extra`` names the pip extra that installs it."""

    code = "missing-dependency"

    def __init__(self, package: str, extra: str, install: str | None = None) -> None:
        command = install or f"pip install 'quorumbench[{extra}]'"
        super().__init__(
            f"this needs the optional package {package!r}; install it with `{command}`"
        )
        self.package = package
        self.extra = extra


class NotFoundError(QuorumError):
    code = "not-found"


class ConflictError(QuorumError):
    code = "conflict"


class DuplicateModelError(ConflictError):
    """``existing_id`` points at the model already registered."""

    code = "duplicate-model"

    def __init__(self, message: str, existing_id: int) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class DuplicateBenchmarkError(ConflictError):
    """The benchmark's name and version exist already (or the name is another's)."""

    code = "duplicate-benchmark"


class InsufficientFundsError(ConflictError):
    """A transfer (funding a pool) larger than the holder's balance: nothing moved."""

    code = "insufficient-funds"


class DuplicateEntryError(ConflictError):
    """The model, or a model with the same weights, is in the pool already."""

    code = "duplicate-entry"


class IdempotencyKeyReusedError(ConflictError):
    """An ``Idempotency-Key`` this account sent before with a different request: nothing
    was done (HTTP 422, as the IETF draft on the header says)."""

    code = "idempotency-key-reused"


class LeaseExpiredError(ConflictError):
    code = "lease-expired"


class AuthenticationError(QuorumError):
    code = "unauthenticated"


class PermissionDeniedError(QuorumError):
    code = "forbidden"


class LoginDeniedError(PermissionDeniedError):
    code = "access-denied"


class CsrfError(PermissionDeniedError):
    """A state-changing form of the site posted without the CSRF token of the session
    it was posted in, or with another one (a forged cross-site request, an old page)."""

    code = "csrf-refused"


class QuotaNotEarnedError(PermissionDeniedError):
    """Registering a model needs accepted evaluations of other people's models first;
    ``evaluations_needed`` says how many more, ``accepted_evaluations`` how many count now."""

    code = "quota-not-earned"

    def __init__(self, message: str, *, accepted_evaluations: int, evaluations_needed: int) -> None:
        super().__init__(message)
        self.accepted_evaluations = accepted_evaluations
        self.evaluations_needed = evaluations_needed


class InvalidStateError(QuorumError):
    code = "invalid-state"


class AuthorizationPendingError(QuorumError):
    """The login is not approved yet; ``interval`` is how long to wait (seconds)."""

    code = "authorization-pending"

    def __init__(self, message: str, interval: int) -> None:
        super().__init__(message)
        self.interval = interval


class SlowDownError(AuthorizationPendingError):
    code = "slow-down"


class LoginExpiredError(QuorumError):
    code = "expired-token"


class ProviderError(QuorumError):
    """The login provider could not be reached, or its answer makes no sense."""

    code = "provider-error"


class RateLimitedError(QuorumError):
    """Too many requests; ``retry_after`` (seconds) when waiting will help."""

    code = "rate-limited"

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidSubmissionError(QuorumError):
    code = "invalid-submission"


class SignatureError(InvalidSubmissionError):
    """A result's signature is missing, unknown, revoked, stale or does not verify."""

    code = "invalid-signature"


class UnsupportedProtocolError(QuorumError):
    """A runner speaks a protocol version (``protocol.py``) the server does not accept.

    ``version`` is the runner's, ``accepted`` the server's range in words; waiting does
    not help, only installing another quorumbench on the runner.
    """

    code = "unsupported-protocol"

    def __init__(self, message: str, version: str, accepted: str) -> None:
        super().__init__(message)
        self.version = version
        self.accepted = accepted


class RegistrationError(QuorumError):
    """``check`` names the validation check that refused the model (a finding code of
    the submission report, ``services/submissions``), when the raiser knows it."""

    code = "registration-refused"

    def __init__(self, message: str, *, check: str | None = None, hint: Hint | None = None) -> None:
        super().__init__(message, hint=hint)
        self.check = check


class ServiceUnavailableError(QuorumError):
    """Something we depend on is down; the same request may work later."""

    code = "service-unavailable"


class DatabaseUnavailableError(ServiceUnavailableError):
    """The database cannot be reached, refuses the login, or does not exist."""

    code = "database-unavailable"


class QueueUnavailableError(ServiceUnavailableError):
    """The task queue's store (Redis) cannot be reached or refused a command."""

    code = "queue-unavailable"


class ServerUnavailableError(ServiceUnavailableError):
    """The server could not be reached, or kept failing (5xx/429) after the retries."""

    code = "server-unavailable"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
