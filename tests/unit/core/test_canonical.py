import hashlib

import pytest

from quorumbench.core.canonical import canonical_json, outputs_digest, sha256_hex


def test_keys_are_sorted_and_whitespace_dropped():
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()


def test_nan_is_refused():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_sha256_hex_accepts_text_and_bytes():
    assert sha256_hex("abc") == sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_outputs_digest_is_the_documented_line_format():
    entries = [("0001", "a" * 64), ("0002", "b" * 64)]
    text = f"0001\t{'a' * 64}\n0002\t{'b' * 64}\n"
    assert outputs_digest(entries) == hashlib.sha256(text.encode()).hexdigest()


def test_outputs_digest_depends_on_order():
    a, b = ("1", "x" * 64), ("2", "y" * 64)
    assert outputs_digest([a, b]) != outputs_digest([b, a])
