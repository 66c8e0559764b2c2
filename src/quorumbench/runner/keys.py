"""The runner's Ed25519 signing key: made once, kept in a 0600 file, used per result."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.errors import ConfigError


def default_key_file(runner_name: str) -> Path:
    """``$XDG_CONFIG_HOME/quorumbench/runner-keys/<name>.key`` (``~/.config`` by default)."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "quorumbench" / "runner-keys" / f"{runner_name}.key"


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
        self, task: Mapping[str, Any], lease_id: int, attempt: int, result: Mapping[str, Any]
    ) -> dict[str, str]:
        """The ``signature`` object of a submission of ``result`` under this lease."""
        signed_at = datetime.now(UTC).isoformat()
        message = message_for_task(task, lease_id, attempt, result_digest(result), signed_at)
        value = self.signing_key.sign(message).signature.hex()
        return {"key_id": self.key_id, "signed_at": signed_at, "value": value}


def create_key(path: Path, *, replace: bool = False) -> RunnerKey:
    """Make a new key at ``path`` (mode 0600); an existing one is kept unless ``replace``."""
    if path.exists() and not replace:
        return load_key(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = SigningKey.generate()
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(bytes(key).hex() + "\n")
    os.replace(tmp, path)
    return RunnerKey(key, path)


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
