"""The server's Ed25519 key files: made once, read back, refused when unusable."""

from __future__ import annotations

import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from quorumbench.core.canonical import sha256_hex
from quorumbench.errors import ConfigError
from quorumbench.services.keys import MissingKeyError, key_from_pem, load_key_file, make_key_file


def test_a_key_file_is_made_once_private_and_read_back(tmp_path):
    path = tmp_path / "keys" / "k.pem"
    made = load_key_file(path, "test key", create=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    make_key_file(path)  # a file is there: it stays
    again = load_key_file(path, "test key")
    assert again.key_id == made.key_id == sha256_hex(bytes.fromhex(made.public_hex))
    signature = bytes.fromhex(made.sign(b"message"))
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(made.public_hex)).verify(signature, b"message")


def test_a_missing_key_is_not_made_unless_asked(tmp_path):
    path = tmp_path / "k.pem"
    with pytest.raises(MissingKeyError, match=f"there is no auth signing key at {path}"):
        load_key_file(path, "auth signing key")
    assert not path.exists()


def test_keys_that_are_not_ed25519_pem_are_refused_naming_the_key(tmp_path):
    rsa = generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ConfigError, match="the log signing key in X is not an Ed25519 key"):
        key_from_pem(rsa, "log signing key", "in X")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(ConfigError, match=f"cannot read the auth signing key {garbage}"):
        load_key_file(garbage, "auth signing key")
