"""The server's own Ed25519 keys: the public log's and the access JWTs' (one job each).

A key is a PEM file (PKCS#8, unencrypted, mode 0600), read once when the server's
context is built (``services/wiring.py``) and kept in the context for the process's
life. Which file, and whether a missing one may be made, is each key's owner's call
(``publiclog.read_signer``, ``sessions.load_auth_key``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quorumbench.core.canonical import sha256_hex
from quorumbench.errors import ConfigError


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key, its public half (hex) and its id (the public half's
    SHA-256, hex)."""

    key: Ed25519PrivateKey
    public_hex: str
    key_id: str

    def sign(self, message: bytes) -> str:
        return self.key.sign(message).hex()


class MissingKeyError(ConfigError):
    """A key file is not there (and may not be made here)."""

    def __init__(self, what: str, path: Path) -> None:
        super().__init__(f"there is no {what} at {path}")
        self.path = path


def signing_key(key: object, what: str, where: str) -> SigningKey:
    """``key`` as a SigningKey; ConfigError naming ``what`` and ``where`` unless it is
    an Ed25519 private key."""
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"the {what} {where} is not an Ed25519 key")
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return SigningKey(key, public.hex(), sha256_hex(public))


def key_from_pem(pem: bytes, what: str, where: str) -> SigningKey:
    """The Ed25519 key in ``pem`` (PKCS#8, unencrypted); errors name ``what`` (e.g.
    "log signing key") and ``where`` (its file, or the setting that held it)."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot read the {what} {where}: {exc}") from exc
    return signing_key(key, what, where)


def make_key_file(path: Path) -> None:
    """Write a new Ed25519 key to ``path`` (mode 0600) unless a file is there already."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another process made it first: theirs is read
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def load_key_file(path: Path, what: str, *, create: bool = False) -> SigningKey:
    """The key at ``path``; with ``create``, a new one is made there if there is none.
    MissingKeyError when there is none (and ``create`` is off)."""
    if create and not path.exists():
        make_key_file(path)
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        raise MissingKeyError(what, path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc}") from exc
    return key_from_pem(pem, what, str(path))
