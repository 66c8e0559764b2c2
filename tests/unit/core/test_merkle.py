"""RFC 6962 Merkle tree: known-answer vectors and every way a proof can be wrong.

The leaf inputs, roots and proofs are the Certificate Transparency reference
vectors (transparency-dev/merkle, ``testonly``).
"""

from __future__ import annotations

import hashlib

import pytest

from quorumbench.core.merkle import (
    EMPTY_ROOT,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

INPUTS = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
]
LEAVES = [leaf_hash(bytes.fromhex(x)) for x in INPUTS]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
H = {
    "l1": "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "l0": "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "l4": "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "n23": "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    "n45": "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    "n67": "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    "n0_3": "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "n4_7": "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    "n01": "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
}
INCLUSION = [
    (0, 1, []),
    (0, 2, ["l1"]),
    (1, 2, ["l0"]),
    (2, 3, ["n01"]),
    (1, 5, ["l0", "n23", "l4"]),
    (0, 8, ["l1", "n23", "n4_7"]),
    (5, 8, ["l4", "n67", "n0_3"]),
]
CONSISTENCY = [
    (1, 1, []),
    (1, 8, ["l1", "n23", "n4_7"]),
    (2, 5, ["n23", "l4"]),
    (6, 8, ["n45", "n67", "n0_3"]),
]


def hexes(names: list[str]) -> list[bytes]:
    return [bytes.fromhex(H[n]) for n in names]


@pytest.mark.parametrize("size", range(9))
def test_known_roots(size: int) -> None:
    assert root(LEAVES[:size]).hex() == ROOTS[size]


def test_the_empty_root_is_the_hash_of_nothing() -> None:
    assert EMPTY_ROOT == hashlib.sha256(b"").digest() == root([])


@pytest.mark.parametrize(("index", "size", "names"), INCLUSION)
def test_known_inclusion_proofs(index: int, size: int, names: list[str]) -> None:
    proof = inclusion_proof(LEAVES[:size], index)
    assert proof == hexes(names)
    verify_inclusion(LEAVES[index], index, size, proof, bytes.fromhex(ROOTS[size]))


@pytest.mark.parametrize(("old", "new", "names"), CONSISTENCY)
def test_known_consistency_proofs(old: int, new: int, names: list[str]) -> None:
    proof = consistency_proof(LEAVES[:new], old)
    assert proof == hexes(names)
    verify_consistency(old, bytes.fromhex(ROOTS[old]), new, bytes.fromhex(ROOTS[new]), proof)


def synthetic(n: int) -> list[bytes]:
    return [leaf_hash(f"entry-{i}".encode()) for i in range(n)]


def test_every_proof_verifies_at_every_size_up_to_40() -> None:
    leaves = synthetic(40)
    roots = [root(leaves[:n]) for n in range(41)]
    for size in range(1, 41):
        for index in range(size):
            proof = inclusion_proof(leaves[:size], index)
            verify_inclusion(leaves[index], index, size, proof, roots[size])
        for old in range(1, size + 1):
            verify_consistency(
                old, roots[old], size, roots[size], consistency_proof(leaves[:size], old)
            )


def flipped(value: bytes) -> bytes:
    return bytes([value[0] ^ 0x01]) + value[1:]


def inclusion_breakages(leaves: list[bytes], index: int) -> list[tuple[str, tuple]]:
    size = len(leaves)
    proof = inclusion_proof(leaves, index)
    top = root(leaves)
    return [
        ("index off by one", (leaves[index], index + 1, size, proof, top)),
        ("index off by minus one", (leaves[index], index - 1, size, proof, top)),
        ("wrong size", (leaves[index], index, size + 1, proof, top)),
        ("half the size", (leaves[index], index, size // 2, proof, top)),
        ("flipped leaf", (flipped(leaves[index]), index, size, proof, top)),
        ("flipped root", (leaves[index], index, size, proof, flipped(top))),
        ("flipped proof node", (leaves[index], index, size, [flipped(proof[0]), *proof[1:]], top)),
        ("truncated proof", (leaves[index], index, size, proof[:-1], top)),
        ("padded proof", (leaves[index], index, size, [*proof, proof[-1]], top)),
        ("short hash", (leaves[index][:31], index, size, proof, top)),
        ("reordered proof", (leaves[index], index, size, list(reversed(proof)), top)),
    ]


# A root does not commit to its size by itself: the signed tree head binds them, and
# the verifier takes the size from there. A wrong size is caught by the proof alone
# when it changes the path's shape, as it does from a complete tree (8 or 16 leaves).
@pytest.mark.parametrize("size", [8, 16])
def test_every_corrupted_inclusion_proof_fails(size: int) -> None:
    leaves = synthetic(size)
    for index in (1, size // 2, size - 2):
        for why, args in inclusion_breakages(leaves, index):
            with pytest.raises(ProofError):
                verify_inclusion(*args)
                pytest.fail(f"{why} (index {index}, size {size}) verified")


@pytest.mark.parametrize(("old", "new"), [(3, 8), (4, 8), (6, 16), (1, 4)])
def test_every_corrupted_consistency_proof_fails(old: int, new: int) -> None:
    leaves = synthetic(new)
    proof = consistency_proof(leaves, old)
    r_old, r_new = root(leaves[:old]), root(leaves)
    rewritten = list(leaves)
    rewritten[0] = leaf_hash(b"forged")  # the history changed under the old root
    cases = [
        ("old size off by one", (old + 1, r_old, new, r_new, proof)),
        ("new size off by one", (old, r_old, new + 1, r_new, proof)),
        ("flipped old root", (old, flipped(r_old), new, r_new, proof)),
        ("flipped new root", (old, r_old, new, flipped(r_new), proof)),
        ("flipped proof node", (old, r_old, new, r_new, [flipped(proof[0]), *proof[1:]])),
        ("truncated proof", (old, r_old, new, r_new, proof[:-1])),
        ("padded proof", (old, r_old, new, r_new, [*proof, proof[-1]])),
        ("shrinking log", (new, r_new, old, r_old, proof)),
        (
            "rewritten history",
            (old, r_old, new, root(rewritten), consistency_proof(rewritten, old)),
        ),
    ]
    for why, args in cases:
        with pytest.raises(ProofError):
            verify_consistency(*args)
            pytest.fail(f"{why} verified")


def test_two_roots_for_one_size_is_a_split_view() -> None:
    a, b = root(synthetic(4)), root([*synthetic(3), leaf_hash(b"other")])
    with pytest.raises(ProofError, match="two different roots"):
        verify_consistency(4, a, 4, b, [])


def test_out_of_range_proof_requests_are_refused() -> None:
    leaves = synthetic(3)
    with pytest.raises(ProofError, match="out of range"):
        inclusion_proof(leaves, 3)
    with pytest.raises(ProofError, match="out of range"):
        consistency_proof(leaves, 0)
    with pytest.raises(ProofError, match="out of range"):
        consistency_proof(leaves, 4)


@pytest.mark.parametrize("new", [1, 2, 5, 8])
def test_the_empty_tree_is_a_prefix_of_every_tree_with_an_empty_proof(new: int) -> None:
    verify_consistency(0, EMPTY_ROOT, new, bytes.fromhex(ROOTS[new]), [])


@pytest.mark.parametrize(
    ("old", "old_root", "new", "proof", "expected"),
    [
        pytest.param(
            4,
            ROOTS[4],
            4,
            ["l0"],
            "a proof between equal sizes must be empty",
            id="a proof between equal sizes",
        ),
        pytest.param(
            0,
            ROOTS[0],
            5,
            ["l0"],
            "a proof from the empty tree must be empty",
            id="a proof from the empty tree",
        ),
        pytest.param(
            0,
            ROOTS[1],
            5,
            [],
            "the empty tree has another root",
            id="an empty tree with another root",
        ),
    ],
)
def test_a_consistency_proof_where_none_is_needed_must_be_empty_and_roots_match(
    old: int, old_root: str, new: int, proof: list[str], expected: str
) -> None:
    with pytest.raises(ProofError) as raised:
        verify_consistency(
            old, bytes.fromhex(old_root), new, bytes.fromhex(ROOTS[new]), hexes(proof)
        )
    assert str(raised.value) == expected
