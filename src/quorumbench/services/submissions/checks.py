"""The checks that read the model itself, not the database: ref, reachability, weights,
code, size and licence.

:func:`inspect_submission` never raises for what it finds: every problem becomes a
finding (an error keeps the exception that refuses the registration). It stops at
the first problem that leaves nothing to read (a ref that cannot be parsed, a path on
the server's disk, an endpoint on a private address, a repo or file that cannot be
read); past that, every check runs and reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from quorumbench.errors import (
    EndpointNotAllowedError,
    InvalidRefError,
    QuorumError,
    RegistrationError,
)
from quorumbench.evaluation.endpoints import Resolver, check_endpoint
from quorumbench.evaluation.refs import ModelRef, parse_ref
from quorumbench.services.model_metadata import ModelMetadata, model_size
from quorumbench.services.submissions.report import DetectedMetadata, Findings, ModelKind
from quorumbench.settings import ServerSettings

Inspector = Callable[[str], ModelMetadata]
LOCAL_PREFIXES = ("/", "./", "../", "~")
BYTES_PER_PARAM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}
"""Pickled weights' bytes per parameter by their declared dtype; unknown: 2, which
over-counts a float32 model's size rather than under-count a half-precision one's."""


@dataclass(frozen=True)
class Submission:
    """What someone submits: a ref, and optionally a name and a family."""

    ref: str
    name: str | None = None
    family: str | None = None


@dataclass(frozen=True)
class Inspected:
    """What the checks found, the metadata read (None when nothing could be), and the
    size the limit was checked against."""

    findings: Findings
    meta: ModelMetadata | None = None
    size: int | None = None
    estimated: bool = False


def finding_code(exc: QuorumError) -> str:
    """The finding code of an error raised while reading a model."""
    if isinstance(exc, RegistrationError) and exc.check:
        return exc.check
    if isinstance(exc, InvalidRefError):
        return "ref-invalid"
    if isinstance(exc, EndpointNotAllowedError):
        return "endpoint-not-allowed"
    return "inspection-failed"


def inspect_submission(
    settings: ServerSettings,
    submission: Submission,
    inspector: Inspector,
    *,
    admin: bool,
    resolve: Resolver | None = None,
) -> Inspected:
    """Read the submitted model and check it (see the module docstring). ``admin``:
    the request has admin powers (a path on the server's disk, an unknown size);
    ``resolve`` replaces the DNS lookup of an endpoint's host (tests)."""
    found = Findings()
    text = submission.ref
    if not admin and text.split(":", 1)[-1].startswith(LOCAL_PREFIXES):  # before any lookup
        refusal = RegistrationError(
            "only an admin may register a path on the server's disk; register a Hub ref "
            "(hf:owner/name@commit) or an openai: endpoint",
            check="local-path",
        )
        found.error("local-path", refusal, "ref")
        return Inspected(found)
    try:
        ref = parse_ref(text, allow_moving=True)
    except InvalidRefError as exc:
        found.error("ref-invalid", exc, "ref")
        return Inspected(found)
    if ref.scheme == "openai":
        try:
            allow = settings.allow_private_endpoints
            if resolve is None:
                check_endpoint(ref.location, allow_private=allow)
            else:
                check_endpoint(ref.location, allow_private=allow, resolve=resolve)
        except EndpointNotAllowedError as exc:
            found.error("endpoint-not-allowed", exc, "ref")
            return Inspected(found)
    try:
        meta = inspector(text)
    except QuorumError as exc:
        found.error(finding_code(exc), exc, "ref")
        return Inspected(found)
    _pinning(found, ref, meta)
    refused_pickle = _code_and_format(found, settings, meta)
    size, estimated = (None, False) if refused_pickle else _size(found, settings, meta, admin)
    _license(found, settings, meta, admin)
    return Inspected(found, meta, size, estimated)


def _pinning(found: Findings, ref: ModelRef, meta: ModelMetadata) -> None:
    pinned = meta.ref.canonical()
    if ref.scheme == "openai":
        found.warning(
            "endpoint-unpinned",
            f"{pinned} is an endpoint: nothing pins what it serves, and its size, licence "
            "and weights cannot be read or checked; runners score whatever it answers",
            "ref",
        )
        return
    if ref.revision == meta.ref.revision:
        return
    given = f"names the branch or tag {ref.revision!r}" if ref.revision else "names no revision"
    what = "commit" if meta.ref.scheme in ("hf", "gguf") and not meta.ref.is_local else "hash"
    found.info(
        "ref-pinned",
        f"{ref.canonical()} {given}: it was resolved to the {what} {meta.ref.revision}, and "
        f"{pinned} is what is registered and evaluated, whatever the branch holds later",
        "ref",
    )


def _code_and_format(found: Findings, settings: ServerSettings, meta: ModelMetadata) -> bool:
    """Remote code and pickled weights; whether pickled weights were refused."""
    pinned = meta.ref.canonical()
    auto_map = meta.details.get("auto_map")
    if auto_map:
        found.error(
            "remote-code",
            RegistrationError(
                f"{pinned} needs its repository's own Python code (config.json auto_map: "
                f"{', '.join(map(str, auto_map))}), which runners do not run: publish it "
                "with an architecture that transformers supports",
                check="remote-code",
            ),
            "ref",
        )
    if "weights_bytes" not in meta.details:
        return False
    if not settings.allow_pickle:
        found.error(
            "weights-pickle-only",
            RegistrationError(
                f"{pinned} has only pickled *.bin weights, and loading a pickle can run "
                "code: publish safetensors weights (or a GGUF file); this server accepts "
                "pickles only with QB_ALLOW_PICKLE",
                check="weights-pickle-only",
            ),
            "ref",
        )
        return True
    found.warning(
        "weights-pickle-only",
        f"{pinned} has only pickled *.bin weights: a runner loads them only with its own "
        "allow_pickle setting, and their size is estimated from their bytes",
        "ref",
    )
    return False


def _size(
    found: Findings, settings: ServerSettings, meta: ModelMetadata, admin: bool
) -> tuple[int | None, bool]:
    """The size checked against ``max_params`` (an adapter with its base), and whether
    it is an estimate from pickled bytes."""
    pinned = meta.ref.canonical()
    size = model_size(meta.params, meta.details).effective_params
    estimated = False
    if size is None and settings.allow_pickle and "weights_bytes" in meta.details:
        own = int(meta.details["weights_bytes"]) // BYTES_PER_PARAM.get(meta.dtype or "", 2)
        if meta.details.get("kind") != "adapter":
            size, estimated = own, True
        elif isinstance(meta.details.get("base_params"), int):
            size, estimated = own + int(meta.details["base_params"]), True
    if size is None:
        if meta.ref.scheme == "openai":
            return None, False
        reason = (
            meta.details.get("params_unknown")
            or meta.details.get("base_params_unknown")
            or "its weights could not be inspected"
        )
        text = f"cannot check the size limit of {pinned}: the parameter count is unknown ({reason})"
        if admin:
            found.warning("params-unknown", f"{text}; an admin request may register it anyway")
        else:
            found.error("params-unknown", RegistrationError(text, check="params-unknown"))
        return None, False
    if size > settings.max_params:
        adapter = " with its base" if meta.details.get("kind") == "adapter" else ""
        about = "about " if estimated else ""
        text = (
            f"{pinned} has {about}{size:,} parameters{adapter}; this server accepts at most "
            f"{settings.max_params:,}"
        )
        found.error("params-over-limit", RegistrationError(text, check="params-over-limit"))
    return size, estimated


def _license(found: Findings, settings: ServerSettings, meta: ModelMetadata, admin: bool) -> None:
    if meta.ref.scheme == "openai":
        return
    pinned = meta.ref.canonical()
    allowed = sorted({name.strip().lower() for name in settings.license_allowlist if name.strip()})
    if meta.license is None:
        text = f"no licence was found for {pinned} (the model card's license, or the GGUF header)"
        if allowed and not admin:
            found.error(
                "license-unknown",
                RegistrationError(
                    f"{text}; this server accepts only {', '.join(allowed)}: name the "
                    "licence in the model card's front matter",
                    check="license-unknown",
                ),
            )
        else:
            found.warning(
                "license-unknown",
                f"{text}; make sure its licence lets the community evaluate it and "
                "publish its scores",
            )
    elif allowed and meta.license.strip().lower() not in allowed:
        found.error(
            "license-not-allowed",
            RegistrationError(
                f"{pinned} is licensed {meta.license!r}; this server accepts only "
                f"{', '.join(allowed)} (QB_LICENSE_ALLOWLIST)",
                check="license-not-allowed",
            ),
        )


def model_kind(meta: ModelMetadata) -> ModelKind:
    kind = meta.details.get("kind")
    if meta.ref.scheme == "openai" or kind == "endpoint":
        return "endpoint"
    if kind == "adapter":
        return "adapter"
    return "gguf" if kind == "gguf" or meta.ref.scheme in ("gguf", "bundled") else "checkpoint"


def detected(inspected: Inspected, submission: Submission) -> DetectedMetadata | None:
    """The report's metadata: what was read, with the submitted name and family."""
    meta = inspected.meta
    if meta is None:
        return None
    return DetectedMetadata(
        ref=meta.ref.canonical(),
        revision=meta.ref.revision,
        name=submission.name or meta.name,
        family=submission.family or meta.family,
        kind=model_kind(meta),
        params=meta.params,
        effective_params=inspected.size,
        params_estimated=inspected.estimated,
        architecture=meta.architecture,
        context_length=meta.context_length,
        dtype=meta.dtype,
        quantization=meta.quantization,
        license=meta.license,
        base_model=meta.base_ref,
        weights_sha256=meta.weights_sha256,
    )
