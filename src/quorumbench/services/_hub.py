"""Hub access for registration: a small protocol, its default over the Hub's HTTP API,
and a wrapper that turns every failure into a :class:`RegistrationError` with the reason.

The server never downloads a model's weights. It lists a repo's files at a commit
(``huggingface_hub``'s ``model_info``, with each file's size and LFS SHA-256) and reads
what it needs with HTTP range requests against the Hub's ``resolve`` URL at that
commit: small files (``config.json``, ``adapter_config.json``, the model card, a
sharded checkpoint's index) whole, weight files only as far as their headers
(safetensors, GGUF). What it reads stays in memory; nothing is written to disk.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx

from quorumbench.errors import MissingDependencyError, QuorumError, RegistrationError
from quorumbench.evaluation.refs import ModelRef
from quorumbench.services._safetensors_meta import front_matter, parse_json

DEFAULT_ENDPOINT = "https://huggingface.co"
MAX_SMALL_FILE = 16 * 1024**2
"""The largest config file, model card or index read, and the largest weight file
outside LFS that is hashed by reading it (the Hub keeps larger files in LFS)."""
_HASH_CHUNK = 4 * 1024**2
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_T = TypeVar("_T")


@dataclass(frozen=True)
class HubFile:
    """One file of a Hub repo at a commit."""

    name: str
    size: int | None = None
    sha256: str | None = None
    """The LFS SHA-256 of the content; ``None`` for a file stored in git itself."""


@dataclass(frozen=True)
class HubRepo:
    """A Hub repo resolved to a commit, with its files at that commit."""

    sha: str
    files: tuple[HubFile, ...]


class HubClient(Protocol):
    """The two Hub calls registration needs; errors propagate as raised."""

    def repo(self, repo_id: str, revision: str | None) -> HubRepo:
        """Resolve ``revision`` (``None``: the default branch) and list the files."""
        ...

    def read(self, repo_id: str, filename: str, revision: str, start: int, length: int) -> bytes:
        """``length`` bytes of a file at ``revision`` from byte ``start`` (fewer only
        where the file ends), without writing anything to disk."""
        ...


class HfHubClient:
    """:class:`HubClient` over the Hub's HTTP API.

    Listing goes through ``huggingface_hub`` (its token: ``HF_TOKEN`` or the stored
    login); reads are ranged ``GET``s with httpx of
    ``{endpoint}/{repo}/resolve/{commit}/{file}``, following the Hub's redirects to
    its storage (httpx drops the token on a redirect to another host).

    Args:
        endpoint: The Hub's base URL; ``None``: ``huggingface_hub``'s (``HF_ENDPOINT``,
            else https://huggingface.co). Tests point it at a local server.
        token: A Hub token; ``None``: ``huggingface_hub``'s, if it is installed.
        timeout_s: Per request.
    """

    def __init__(
        self, endpoint: str | None = None, *, token: str | None = None, timeout_s: float = 30.0
    ) -> None:
        self.endpoint = (endpoint or _default_endpoint()).rstrip("/")
        self._token = token
        self._timeout = timeout_s
        self._http: httpx.Client | None = None

    def _api(self) -> Any:
        try:
            from huggingface_hub import HfApi
        except ImportError as exc:
            raise MissingDependencyError("huggingface_hub", "hf") from exc
        return HfApi(endpoint=self.endpoint, token=self._token)

    def _client(self) -> httpx.Client:
        if self._http is None:
            token = self._token or _stored_token()
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            self._http = httpx.Client(follow_redirects=True, timeout=self._timeout, headers=headers)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> HfHubClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def repo(self, repo_id: str, revision: str | None) -> HubRepo:
        info = self._api().model_info(repo_id, revision=revision, files_metadata=True)
        files = tuple(
            HubFile(s.rfilename, s.size, getattr(s.lfs, "sha256", None) if s.lfs else None)
            for s in info.siblings or ()
        )
        return HubRepo(str(info.sha), files)

    def url(self, repo_id: str, filename: str, revision: str) -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(filename)}"

    def read(self, repo_id: str, filename: str, revision: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        url = self.url(repo_id, filename, revision)
        # identity: byte offsets must be the file's, never those of a compressed body
        headers = {"Range": f"bytes={start}-{start + length - 1}", "Accept-Encoding": "identity"}
        with self._client().stream("GET", url, headers=headers) as response:
            if response.status_code == 416:  # the range starts at or after the end
                return b""
            response.raise_for_status()
            skip = start  # a server that ignores Range sends the file from its start
            if response.status_code == 206:
                match = _CONTENT_RANGE.match(response.headers.get("content-range", ""))
                if match is None or int(match[1]) != start:
                    raise RegistrationError(
                        f"the Hub answered a range request for {filename} with "
                        f"{response.headers.get('content-range')!r}"
                    )
                skip = 0
            data = bytearray()
            for chunk in response.iter_bytes():
                if skip:
                    dropped = min(skip, len(chunk))
                    chunk, skip = chunk[dropped:], skip - dropped
                data += chunk
                if len(data) >= length:
                    break
        return bytes(data[:length])


def _default_endpoint() -> str:
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT)
    return str(constants.ENDPOINT)


def _stored_token() -> str | None:
    try:
        from huggingface_hub import get_token
    except ImportError:
        return os.environ.get("HF_TOKEN") or None
    token: str | None = get_token()
    return token


_PLAIN = {
    "GatedRepoError": "the repository is gated and the server's Hub token was not granted "
    "access to it",
    "RepositoryNotFoundError": "no such repository, or it is private and the server's Hub "
    "token may not read it",
    "RevisionNotFoundError": "the repository has no branch, tag or commit by that name",
    "EntryNotFoundError": "the file is not in the repository at that revision",
}
"""``huggingface_hub``'s errors in plain words, by class name (the package is optional;
a subclass is named before its base: GatedRepoError is a RepositoryNotFoundError)."""


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    technical = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    names = [cls.__name__ for cls in type(exc).__mro__]
    plain = next((_PLAIN[name] for name in names if name in _PLAIN), None)
    return technical if plain is None else f"{plain}; {technical}"


def hub_call(what: str, call: Callable[[], _T], *, check: str = "file-unreadable") -> _T:
    """Run one Hub call; anything but a QuorumError becomes a RegistrationError whose
    ``check`` is ``check`` (a submission report's finding code)."""
    try:
        return call()
    except QuorumError:
        raise
    except Exception as exc:  # network, HTTP, auth and parsing errors alike
        raise RegistrationError(f"cannot {what} ({_reason(exc)})", check=check) from exc


@dataclass(frozen=True)
class HubSource:
    """One Hub file at a commit as a :class:`~._ranges.ByteSource` (ranged reads)."""

    client: HubClient
    repo_id: str
    revision: str
    file: HubFile

    @property
    def name(self) -> str:
        return f"{self.repo_id}/{self.file.name}@{self.revision}"

    @property
    def size(self) -> int | None:
        return self.file.size

    def read(self, start: int, length: int) -> bytes:
        data = b""
        while len(data) < length:  # a server may send less than asked; ask for the rest
            got = self._read(start + len(data), length - len(data))
            if not got:
                break
            data += got
        return data

    def _read(self, start: int, length: int) -> bytes:
        return hub_call(
            f"read {self.name} (bytes {start}-{start + length - 1})",
            lambda: self.client.read(self.repo_id, self.file.name, self.revision, start, length),
        )


class HubCheckout:
    """One Hub repo at one commit, with its calls wrapped into RegistrationError."""

    def __init__(self, client: HubClient, ref: ModelRef) -> None:
        self.client, self.repo_id = client, ref.location
        shown = ref.canonical()
        found = hub_call(
            f"resolve {shown} on the Hub",
            lambda: client.repo(ref.location, ref.revision),
            check="repo-unreachable",
        )
        if not (len(found.sha) == 40 and all(c in "0123456789abcdef" for c in found.sha)):
            raise RegistrationError(
                f"the Hub resolved {shown} to {found.sha!r}, not a commit",
                check="repo-unreachable",
            )
        self.sha = found.sha
        self.files = {f.name: f for f in found.files}

    def source(self, filename: str) -> HubSource:
        return HubSource(self.client, self.repo_id, self.sha, self.files[filename])

    def small(self, filename: str) -> bytes:
        """A whole small file (config, card, index), read into memory."""
        size = self.files[filename].size
        if size is not None and size > MAX_SMALL_FILE:
            raise RegistrationError(f"{self.repo_id}: {filename} is implausibly large ({size} B)")
        data = self.source(filename).read(0, size if size is not None else MAX_SMALL_FILE + 1)
        if len(data) > MAX_SMALL_FILE:
            raise RegistrationError(f"{self.repo_id}: {filename} is implausibly large")
        return data

    def small_json(self, filename: str) -> dict[str, Any]:
        return parse_json(self.small(filename), f"{self.repo_id}/{filename}@{self.sha}")

    def card(self) -> dict[str, Any]:
        readme = self.files.get("README.md")
        if readme is None or (readme.size or 0) > MAX_SMALL_FILE:
            return {}
        return front_matter(self.small("README.md").decode("utf-8", errors="replace"))

    def sha256(self, filename: str) -> str:
        """The file's SHA-256: its LFS hash, or, for a small file kept in git, the hash
        of its bytes read a chunk at a time (never written anywhere)."""
        file = self.files[filename]
        if file.sha256:
            return file.sha256
        if file.size is None or file.size > MAX_SMALL_FILE:
            raise RegistrationError(
                f"{self.repo_id}/{filename}@{self.sha} has no LFS SHA-256 and is too large "
                "to hash without downloading it"
            )
        digest, source, offset = hashlib.sha256(), self.source(filename), 0
        while offset < file.size:
            chunk = source.read(offset, min(_HASH_CHUNK, file.size - offset))
            if not chunk:
                raise RegistrationError(f"{source.name} ended early while being hashed")
            digest.update(chunk)
            offset += len(chunk)
        return digest.hexdigest()
