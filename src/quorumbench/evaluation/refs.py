"""Model references: canonical strings with an immutable revision.

```
hf:<owner>/<name>@<40-hex commit>          a Hub repo (or a LoRA adapter repo)
hf:<local dir>[@<sha256>]                  a local directory (development)
gguf:<owner>/<name>/<file>.gguf@<commit>   a GGUF file in a Hub repo
gguf:<local file>.gguf[@<sha256>]          a local GGUF file
openai:<base url>#<model name>             an OpenAI-compatible endpoint
bundled:<name>                             a model shipped in a Python package
<scheme>:<location>@<revision>             any other scheme: a backend plugin's
```

A local path is one that starts with ``/``, ``./``, ``../`` or ``~``. Its content
hash is computed at load time and recorded as the revision; a hash given after
``@`` must match it.

``parse_ref(text, allow_moving=True)`` also accepts a Hub ref without a revision or
with a branch or tag name (``hf:owner/name@main``); registration resolves those to
a commit before storing anything.

Any other lowercase scheme (``[a-z][a-z0-9-]*``, at most 32 characters) is left to the
backend that declares it (``mock:``, a plugin's ``vllm:``): this module only checks
the form every such ref shares, and ``load_backend`` refuses a scheme no backend owns.
Such a ref is always pinned, as a Hub ref is: its ``<revision>`` is a 40-hex commit or
a 64-hex SHA-256 (lower-cased), required even with ``allow_moving``, since nothing
resolves a plugin's branch names; ``<location>`` is whatever the backend reads there,
without whitespace or control characters (an ``@`` in it is kept: the last one starts
the revision).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlsplit

from quorumbench.errors import InvalidRefError
from quorumbench.protocol import Engine

Scheme = str
"""A ref's scheme: one of :data:`BUILTIN_SCHEMES` or a backend's own (``mock``, ``vllm``…)."""

BUILTIN_SCHEMES = ("hf", "gguf", "openai", "bundled")
"""Schemes whose refs this module parses itself; no other backend may claim them."""

SCHEME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
"""What any scheme looks like (a backend plugin declares its schemes in this form)."""

_GIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_GIT_REF_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][\w./-]*$")
_LOCAL_PREFIXES = ("/", "./", "../", "~")


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference."""

    scheme: Scheme
    location: str
    """Hub repo id, local path, endpoint base URL, bundled name, or what a backend
    plugin reads after its scheme."""
    revision: str | None = None
    """40-hex commit (Hub) or 64-hex SHA-256 (local content); always set on a plugin's ref."""
    filename: str | None = None
    """GGUF file name inside a Hub repo."""
    model_name: str | None = None
    """Model name at an OpenAI-compatible endpoint."""

    @property
    def is_local(self) -> bool:
        return self.scheme in ("hf", "gguf") and self.location.startswith(_LOCAL_PREFIXES)

    def with_revision(self, revision: str) -> ModelRef:
        return replace(self, revision=revision)

    def canonical(self) -> str:
        """The canonical string; parsing it gives this reference back."""
        if self.scheme == "openai":
            return f"openai:{self.location}#{self.model_name}"
        if self.scheme == "bundled":
            return f"bundled:{self.location}" + (f"@{self.revision}" if self.revision else "")
        body = self.location
        if self.filename is not None:
            body = f"{body}/{self.filename}"
        return f"{self.scheme}:{body}" + (f"@{self.revision}" if self.revision else "")

    def __str__(self) -> str:
        return self.canonical()


def engine_for(ref: ModelRef, adapter_base: ModelRef | None = None) -> Engine | None:
    """The engine family that evaluates ``ref`` from protocol 1.3 on: a GGUF file (a
    ``gguf:`` or ``bundled:`` ref) runs as it is on llama.cpp, and so does an ``hf:``
    LoRA adapter whose ``adapter_base`` is a GGUF file (protocol 1.4); any other
    ``hf:`` checkpoint or adapter runs on transformers, an ``openai:`` ref at its
    endpoint; a backend plugin's scheme is its own engine (None)."""
    if ref.scheme in ("gguf", "bundled"):
        return "llamacpp"
    if ref.scheme == "hf":
        if adapter_base is not None and adapter_base.scheme in ("gguf", "bundled"):
            return "llamacpp"
        return "transformers"
    if ref.scheme == "openai":
        return "endpoint"
    return None


def gguf_adapter_base(base: str, revision: object) -> ModelRef | None:
    """The GGUF base an adapter's ``adapter_config.json`` names, or None when its base
    is a transformers checkpoint.

    ``base_model_name_or_path`` names a GGUF base as a ref: ``bundled:<name>``,
    ``gguf:<local file>.gguf`` or ``gguf:<owner>/<name>/<file>.gguf`` with the Hub
    commit after ``@`` or in ``revision`` (peft's own key for the base's revision)."""
    if not base.startswith(("gguf:", "bundled:")):
        return None
    if base.startswith("gguf:") and "@" not in base and isinstance(revision, str) and revision:
        base = f"{base}@{revision}"
    return parse_ref(base)


def _split_revision(body: str, text: str, allow_moving: bool) -> tuple[str, str | None]:
    if "@" not in body:
        return body, None
    location, _, given = body.rpartition("@")
    revision = given.lower()
    if not (_GIT_SHA.match(revision) or _SHA256.match(revision)):
        if allow_moving and _GIT_REF_NAME.match(given):
            return location, given
        raise InvalidRefError(
            f"bad model ref {text!r}: the revision after '@' must be a 40-hex commit or a "
            f"64-hex SHA-256, not {revision!r} (branch and tag names move; pin a commit)"
        )
    return location, revision


def _parse_hub_or_local(
    scheme: Literal["hf", "gguf"], body: str, text: str, allow_moving: bool
) -> ModelRef:
    location, revision = _split_revision(body, text, allow_moving)
    if not location:
        raise InvalidRefError(f"bad model ref {text!r}: nothing after '{scheme}:'")
    if location.startswith(_LOCAL_PREFIXES):
        if revision is not None and not _SHA256.match(revision):
            raise InvalidRefError(
                f"bad model ref {text!r}: a local path is pinned by its 64-hex SHA-256"
            )
        if scheme == "gguf" and not location.endswith(".gguf"):
            raise InvalidRefError(f"bad model ref {text!r}: a gguf ref names a .gguf file")
        return ModelRef(scheme, location, revision)
    if allow_moving:
        if revision is not None and _SHA256.match(revision):
            raise InvalidRefError(
                f"bad model ref {text!r}: a Hub ref is pinned by a 40-hex commit, not a SHA-256"
            )
    elif revision is None or not _GIT_SHA.match(revision):
        raise InvalidRefError(
            f"bad model ref {text!r}: a Hub ref must be pinned to a 40-hex commit, "
            f"e.g. {scheme}:owner/name@<commit>; local paths start with '/', './' or '~'"
        )
    if scheme == "gguf":
        repo, _, filename = location.rpartition("/")
        if not filename.endswith(".gguf") or not _REPO_ID.match(repo):
            raise InvalidRefError(
                f"bad model ref {text!r}: expected gguf:<owner>/<name>/<file>.gguf@<commit>"
            )
        return ModelRef("gguf", repo, revision, filename=filename)
    if not _REPO_ID.match(location):
        raise InvalidRefError(f"bad model ref {text!r}: {location!r} is not an owner/name repo id")
    return ModelRef("hf", location, revision)


def _parse_openai(body: str, text: str) -> ModelRef:
    base, sep, model = body.partition("#")
    try:
        parts = urlsplit(base)
    except ValueError as exc:  # e.g. an unclosed '[' of an IPv6 host
        raise InvalidRefError(f"bad model ref {text!r}: {base!r} is not a URL ({exc})") from None
    if not sep or not model:
        raise InvalidRefError(f"bad model ref {text!r}: expected openai:<base url>#<model name>")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidRefError(f"bad model ref {text!r}: {base!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise InvalidRefError(
            "bad model ref: put credentials in QB_OPENAI_API_KEY, not in the URL "
            f"({parts.hostname})"
        )
    return ModelRef("openai", base.rstrip("/"), model_name=model)


def _parse_other(scheme: str, body: str, text: str) -> ModelRef:
    """A ref of a scheme this module does not know: a backend plugin's (module docstring)."""
    if not SCHEME.match(scheme):
        raise InvalidRefError(
            f"bad model ref {text!r}: unknown scheme {scheme!r} (a scheme is lowercase "
            "letters, digits and '-', starting with a letter)"
        )
    location, sep, given = body.rpartition("@")
    revision = given.lower()
    if not sep or not (_GIT_SHA.match(revision) or _SHA256.match(revision)):
        raise InvalidRefError(
            f"bad model ref {text!r}: unknown scheme {scheme!r} (not one of "
            f"{', '.join(BUILTIN_SCHEMES)}); a backend plugin's ref is pinned: "
            f"{scheme}:<location>@<40-hex commit or 64-hex SHA-256>"
        )
    if not location:
        raise InvalidRefError(f"bad model ref {text!r}: nothing between '{scheme}:' and '@'")
    if any(c.isspace() or not c.isprintable() for c in location):
        raise InvalidRefError(
            f"bad model ref {text!r}: the location holds whitespace or control characters"
        )
    return ModelRef(scheme, location, revision)


def parse_ref(text: str, *, allow_moving: bool = False) -> ModelRef:
    """Parse a model reference, raising :class:`InvalidRefError` with the reason.

    Args:
        text: The reference, e.g. ``hf:owner/name@<commit>``.
        allow_moving: Also accept a Hub ref (``hf:``/``gguf:`` on a repo) with no
            revision or with a branch or tag name; the name is kept as given in
            ``ModelRef.revision`` (``None`` when missing) for the caller to resolve
            to a commit. Local paths are still pinned by SHA-256 only, and a backend
            plugin's ref by a commit or SHA-256.
    """
    text = text.strip()
    scheme, sep, body = text.partition(":")
    if not sep:
        raise InvalidRefError(
            f"bad model ref {text!r}: expected one of hf:, gguf:, openai:, bundled: or a "
            "backend plugin's scheme (e.g. hf:HuggingFaceTB/SmolLM2-135M-Instruct@<commit>)"
        )
    if scheme in ("hf", "gguf"):
        return _parse_hub_or_local(scheme, body, text, allow_moving)  # type: ignore[arg-type]
    if scheme == "openai":
        return _parse_openai(body, text)
    if scheme == "bundled":
        name, _, revision = body.partition("@")
        if not re.match(r"^[a-z0-9][a-z0-9.-]*$", name):
            raise InvalidRefError(f"bad model ref {text!r}: bundled names are lowercase")
        if revision and not re.fullmatch(r"[0-9a-fA-F]{64}", revision):
            raise InvalidRefError(
                f"bad model ref {text!r}: a bundled model is pinned by the 64-hex SHA-256 "
                "of its file"
            )
        return ModelRef("bundled", name, revision.lower() or None)
    return _parse_other(scheme, body, text)
