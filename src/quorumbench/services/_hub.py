"""Hub access for registration: a small protocol, its ``huggingface_hub`` default, and
a wrapper that turns every failure into a :class:`RegistrationError` with the reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from quorumbench.backends._files import file_sha256
from quorumbench.errors import MissingDependencyError, QuorumError, RegistrationError
from quorumbench.evaluation.refs import ModelRef
from quorumbench.services._safetensors_meta import front_matter, read_json

_MAX_SMALL_FILE = 16 * 1024**2
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
    """The few Hub calls registration needs; errors propagate as raised."""

    def repo(self, repo_id: str, revision: str | None) -> HubRepo:
        """Resolve ``revision`` (``None``: the default branch) and list the files."""
        ...

    def parameter_counts(
        self, repo_id: str, revision: str, filename: str | None = None
    ) -> dict[str, int]:
        """Parameters per safetensors dtype of the repo (or of one file); ``{}`` if none."""
        ...

    def download(self, repo_id: str, filename: str, revision: str, cache_dir: Path | None) -> Path:
        """Download one file at ``revision`` and return its local path."""
        ...


class HfHubClient:
    """:class:`HubClient` over ``huggingface_hub`` (token from ``HF_TOKEN`` as usual)."""

    def _api(self) -> Any:
        try:
            from huggingface_hub import HfApi
        except ImportError as exc:
            raise MissingDependencyError("huggingface_hub", "hf") from exc
        return HfApi()

    def repo(self, repo_id: str, revision: str | None) -> HubRepo:
        info = self._api().model_info(repo_id, revision=revision, files_metadata=True)
        files = tuple(
            HubFile(s.rfilename, s.size, getattr(s.lfs, "sha256", None) if s.lfs else None)
            for s in info.siblings or ()
        )
        return HubRepo(str(info.sha), files)

    def parameter_counts(
        self, repo_id: str, revision: str, filename: str | None = None
    ) -> dict[str, int]:
        from huggingface_hub.errors import NotASafetensorsRepoError

        api = self._api()
        if filename is not None:
            meta = api.parse_safetensors_file_metadata(repo_id, filename, revision=revision)
            return {str(k): int(v) for k, v in meta.parameter_count.items()}
        try:
            meta = api.get_safetensors_metadata(repo_id, revision=revision)
        except NotASafetensorsRepoError:
            return {}
        return {str(k): int(v) for k, v in meta.parameter_count.items()}

    def download(self, repo_id: str, filename: str, revision: str, cache_dir: Path | None) -> Path:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir))


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def hub_call(what: str, call: Callable[[], _T]) -> _T:
    """Run one Hub call; anything but a QuorumError becomes a RegistrationError."""
    try:
        return call()
    except QuorumError:
        raise
    except Exception as exc:  # network, HTTP, auth and parsing errors alike
        raise RegistrationError(f"cannot {what} ({_reason(exc)})") from exc


class HubCheckout:
    """One Hub repo at one commit, with its calls wrapped into RegistrationError."""

    def __init__(self, client: HubClient, ref: ModelRef, cache_dir: Path | None) -> None:
        self.client, self.repo_id, self.cache_dir = client, ref.location, cache_dir
        shown = ref.canonical()
        found = hub_call(
            f"resolve {shown} on the Hub", lambda: client.repo(ref.location, ref.revision)
        )
        if not (len(found.sha) == 40 and all(c in "0123456789abcdef" for c in found.sha)):
            raise RegistrationError(f"the Hub resolved {shown} to {found.sha!r}, not a commit")
        self.sha = found.sha
        self.files = {f.name: f for f in found.files}

    def path(self, filename: str) -> Path:
        return hub_call(
            f"download {filename} from {self.repo_id}@{self.sha}",
            lambda: self.client.download(self.repo_id, filename, self.sha, self.cache_dir),
        )

    def small_json(self, filename: str) -> dict[str, Any]:
        size = self.files[filename].size
        if size is not None and size > _MAX_SMALL_FILE:
            raise RegistrationError(f"{self.repo_id}: {filename} is implausibly large ({size} B)")
        return read_json(self.path(filename))

    def card(self) -> dict[str, Any]:
        readme = self.files.get("README.md")
        if readme is None or (readme.size or 0) > _MAX_SMALL_FILE:
            return {}
        return front_matter(self.path("README.md").read_text(encoding="utf-8", errors="replace"))

    def sha256(self, filename: str) -> str:
        lfs = self.files[filename].sha256
        return lfs if lfs else file_sha256(self.path(filename))

    def counts(self, filename: str | None = None) -> dict[str, int]:
        where = f"{self.repo_id}/{filename}" if filename else self.repo_id
        return hub_call(
            f"read the safetensors headers of {where}@{self.sha}",
            lambda: self.client.parameter_counts(self.repo_id, self.sha, filename),
        )
