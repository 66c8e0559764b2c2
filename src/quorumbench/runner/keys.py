"""The runner's Ed25519 signing key: made once, kept in a 0600 file, used per result.

A key belongs to one runner of one account on one server, and so does its file:
``$XDG_CONFIG_HOME/quorumbench/runner-keys/<server>/<account>/<runner>.key``
(:func:`key_file_for`). Before that, keys were kept per runner name only
(:func:`legacy_key_file`), so two accounts on one machine could pick up each other's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from nacl.signing import SigningKey

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.errors import ConfigError
from quorumbench.protocol import EdgeReport, ResultPayload, ResultSignature, Task

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def keys_root() -> Path:
    """``$XDG_CONFIG_HOME/quorumbench/runner-keys`` (``~/.config`` by default)."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "quorumbench" / "runner-keys"


def _component(text: str) -> str:
    """``text`` as one safe path component (never empty, ``.`` or ``..``)."""
    safe = _UNSAFE.sub("_", text).strip(".") or "_"
    return safe[:120]


def server_dir_name(server_url: str) -> str:
    """The directory name of a server's keys: ``host_port`` and the path, sanitized
    (``http://127.0.0.1:8000`` → ``127.0.0.1_8000``; the scheme does not matter)."""
    parts = urlsplit(server_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if parts.scheme == "https" else 80)
    return _component(f"{parts.hostname or 'server'}_{port}{parts.path.rstrip('/')}")


def key_file_for(server_url: str, account: str, runner: str) -> Path:
    """Where runner ``runner`` of ``account`` on ``server_url`` keeps its key."""
    server = server_dir_name(server_url)
    return keys_root() / server / _component(account) / f"{_component(runner)}.key"


def legacy_key_file(runner: str) -> Path:
    """Where keys were kept before they were per server and account: by name only."""
    return keys_root() / f"{_component(runner)}.key"


@dataclass(frozen=True)
class RunnerKey:
    """A loaded signing key; ``public_hex`` and ``key_id`` go to the server."""

    signing_key: SigningKey
    path: Path

    @property
    def public_hex(self) -> str:
        return bytes(self.signing_key.verify_key).hex()

    @property
    def key_id(self) -> str:
        return sha256_hex(bytes(self.signing_key.verify_key))

    def sign_result(
        self, task: Task, lease_id: int, attempt: int, result: ResultPayload | EdgeReport
    ) -> ResultSignature:
        """The ``signature`` of a submission of ``result`` (a scored result or an edge
        report) under this lease."""
        signed_at = datetime.now(UTC).isoformat()
        message = message_for_task(task, lease_id, attempt, result_digest(result), signed_at)
        value = self.signing_key.sign(message).signature.hex()
        return ResultSignature(key_id=self.key_id, signed_at=signed_at, value=value)


def new_key(path: Path) -> RunnerKey:
    """A fresh key that will live at ``path``; nothing is written (see :func:`save_key`)."""
    return RunnerKey(SigningKey.generate(), path)


def save_key(key: RunnerKey) -> RunnerKey:
    """Write ``key`` to its path (mode 0600, its directories 0700), replacing a file there."""
    key.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = key.path.with_name(key.path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(bytes(key.signing_key).hex() + "\n")
    os.replace(tmp, key.path)
    return key


def create_key(path: Path, *, replace: bool = False) -> RunnerKey:
    """Make a new key at ``path`` (mode 0600); an existing one is kept unless ``replace``."""
    if path.exists() and not replace:
        return load_key(path)
    return save_key(new_key(path))


def copy_key(key: RunnerKey, path: Path) -> RunnerKey:
    """``key`` written to ``path`` too (the original file stays)."""
    return save_key(RunnerKey(key.signing_key, path))


def load_key(path: Path) -> RunnerKey:
    """The key at ``path``; a ConfigError that says what to do when there is none."""
    if not path.exists():
        raise ConfigError(
            f"no signing key at {path}: run `quorumbench runner init` first (it makes one "
            "and registers it with the server)"
        )
    if path.stat().st_mode & 0o077:
        raise ConfigError(f"{path} is readable by others: chmod 600 it (or make a new key)")
    try:
        seed = bytes.fromhex(path.read_text().strip())
        return RunnerKey(SigningKey(seed), path)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is not a runner key ({exc})") from exc
