"""The public log's Merkle tree: RFC 6962 hashing, inclusion and consistency proofs.

Hashes (RFC 6962 §2.1): a leaf is ``SHA-256(0x00 || data)``, an interior node
``SHA-256(0x01 || left || right)``, the empty tree ``SHA-256("")``. A tree of ``n``
leaves splits at ``k``, the largest power of two below ``n``. Proofs follow RFC 6962
§2.1.1-2.1.2; their verification follows RFC 9162 §2.1.3.2 and §2.1.4.2, which
check the proof's length exactly, so a truncated or padded proof fails.

Everything here works on 32-byte hashes and is pure: the server keeps the leaf
hashes, the verifier recomputes them from the entries it downloaded.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof or tree head that does not verify."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of ``leaves`` (leaf hashes, not raw data)."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    # Bottom-up: pair neighbours; an odd last node moves up unchanged. This builds
    # the same tree as the recursive split at the largest power of two.
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``leaves`` (RFC 6962 PATH)."""
    if not 0 <= index < len(leaves):
        raise ProofError(f"leaf index {index} out of range for a tree of {len(leaves)}")
    return _path(index, leaves)


def _path(m: int, d: Sequence[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return _path(m, d[:k]) + [root(d[k:])]
    return _path(m - k, d[k:]) + [root(d[:k])]


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """Proof that the first ``old_size`` leaves are a prefix of ``leaves`` (RFC 6962 PROOF)."""
    if not 0 < old_size <= len(leaves):
        raise ProofError(f"old size {old_size} out of range for a tree of {len(leaves)}")
    return _subproof(old_size, leaves, True)


def _subproof(m: int, d: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if complete else [root(d)]
    k = _split(n)
    if m <= k:
        return _subproof(m, d[:k], complete) + [root(d[k:])]
    return _subproof(m - k, d[k:], False) + [root(d[:k])]


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes, not {HASH_SIZE}")


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes
) -> None:
    """Check that ``leaf`` (a leaf hash) is entry ``index`` of the tree ``expected_root``.

    Raises ProofError with the reason; returns None when the proof holds.
    """
    for value, what in [
        (leaf, "leaf hash"),
        (expected_root, "root"),
        *((p, "proof node") for p in proof),
    ]:
        _check_hash(value, what)
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} out of range for a tree of {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the path")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the path")
    if not hmac.compare_digest(r, expected_root):
        raise ProofError("inclusion proof leads to another root")


def verify_consistency(
    old_size: int, old_root: bytes, new_size: int, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree ``old_root`` of ``old_size`` is a prefix of ``new_root``.

    Raises ProofError with the reason; returns None when the proof holds.
    """
    for value, what in [
        (old_root, "old root"),
        (new_root, "new root"),
        *((p, "proof node") for p in proof),
    ]:
        _check_hash(value, what)
    if not 0 <= old_size <= new_size:
        raise ProofError(f"sizes {old_size} -> {new_size}: a log never shrinks")
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if not hmac.compare_digest(old_root, new_root):
            raise ProofError(f"two different roots for size {old_size}")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a proof from the empty tree must be empty")
        if not hmac.compare_digest(old_root, EMPTY_ROOT):
            raise ProofError("the empty tree has another root")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    nodes = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the proof
        nodes.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = nodes[0]
    for c in nodes[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than needed")
        if fn % 2 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than needed")
    if not hmac.compare_digest(fr, old_root):
        raise ProofError("consistency proof does not lead to the old root")
    if not hmac.compare_digest(sr, new_root):
        raise ProofError("consistency proof does not lead to the new root")
