"""The checks ``quorumbench verify`` runs on a downloaded log, against tampering."""

from __future__ import annotations

import copy

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.merkle import consistency_proof, root
from quorumbench.core.publiclog import (
    check_canaries,
    check_consistency_proof,
    check_key_chain,
    check_log,
    entry_leaf,
    frontier_append,
    frontier_root,
    head_message,
    leaderboard_from_log,
    rotation_message,
)

KEY = Ed25519PrivateKey.generate()
KEY_ID = "k1"


def verify_sig(message: bytes, signature: str, key_id: str) -> bool:
    try:
        KEY.public_key().verify(bytes.fromhex(signature), message)
    except InvalidSignature:
        return False
    return key_id == KEY_ID


def entry(i: int, score: float = 0.5) -> dict:
    return {
        "task": {
            "id": i,
            "model": {"id": i % 3, "ref": f"hf:o/m{i % 3}@{'0' * 40}"},
            "benchmark": {"name": "arith", "version": 1, "dataset_sha256": "d" * 64},
            "n_samples": 2,
            "sample_ids": [f"s{i}a", f"s{i}b"],
        },
        "results": [{"id": 10 * i + k, "score": score} for k in range(3)],
        "consensus": {"status": "DONE", "score": score, "sample_consensus": [score, score]},
    }


def rows(entries: list[dict]) -> list[dict]:
    return [
        {"index": i, "leaf_hash": entry_leaf(e).hex(), "entry": e} for i, e in enumerate(entries)
    ]


def head(entries: list[dict], size: int | None = None, *, key=KEY) -> dict:
    size = len(entries) if size is None else size
    root_hex = root([entry_leaf(e) for e in entries[:size]]).hex()
    ts = f"2026-11-23T00:00:{size:02d}+00:00"
    sig = key.sign(head_message(size, root_hex, ts, KEY_ID)).hex()
    return {"size": size, "root": root_hex, "timestamp": ts, "key_id": KEY_ID, "signature": sig}


@pytest.fixture
def log() -> list[dict]:
    return [entry(i) for i in range(7)]


def problems(served: list[dict], newest: dict, seen: list[dict] = ()) -> list[str]:
    return [str(p) for p in check_log(served, newest, verify_sig, seen)]


def test_an_honest_log_verifies(log) -> None:
    assert problems(rows(log), head(log), [head(log, 3), head(log, 5)]) == []


def test_a_single_altered_score_is_found(log) -> None:
    served = rows(log)
    served[4]["entry"] = copy.deepcopy(served[4]["entry"])
    served[4]["entry"]["consensus"]["score"] = 0.9
    found = problems(served, head(log))
    assert "entry 4: content does not hash to its leaf (altered)" in found
    # re-hashing the altered entry instead only moves the mismatch to the root
    served[4]["leaf_hash"] = entry_leaf(served[4]["entry"]).hex()
    assert problems(served, head(log)) == ["tree head size 7: root differs from the entries'"]


def test_a_dropped_entry_is_found(log) -> None:
    served = rows(log)
    del served[2]
    found = problems(served, head(log))
    assert "log: 6 entries served, the head says 7" in found
    assert any("reordered" in p for p in found)  # every later index is off by one


def test_a_reordered_entry_is_found(log) -> None:
    served = rows(log)
    served[1], served[2] = served[2], served[1]
    found = problems(served, head(log))
    assert "entry 1: served as index 2 (reordered?)" in found
    assert "tree head size 7: root differs from the entries'" in found


def test_a_forged_signature_is_found(log) -> None:
    forged = head(log, key=Ed25519PrivateKey.generate())
    assert problems(rows(log), forged) == ["tree head size 7: signature does not verify"]
    tampered = dict(head(log), size=6)  # a real signature over other values
    assert "tree head size 6: signature does not verify" in problems(rows(log)[:6], tampered)


def test_a_rewritten_history_is_found(log) -> None:
    seen = [head(log, 4)]
    rewritten = list(log)
    rewritten[1] = entry(1, score=0.1)
    found = problems(rows(rewritten), head(rewritten), seen)
    assert found == ["tree head size 4: history rewritten: entries differ"]


def test_two_heads_of_one_size_with_different_roots_are_a_split_view(log) -> None:
    other = list(log)
    other[6] = entry(99)
    found = problems(rows(log), head(log), [head(other)])
    assert "tree head size 7: two roots for one size" in found


def test_a_log_that_shrank_is_found(log) -> None:
    found = problems(rows(log[:5]), head(log, 5), [head(log, 7)])
    assert "tree head size 7: the log shrank since" in found


def test_the_compact_range_gives_the_tree_root_at_every_size() -> None:
    leaves = [entry_leaf(entry(i)) for i in range(40)]
    frontier: list = []
    assert frontier_root(frontier) == root([])
    for n, leaf in enumerate(leaves, start=1):
        frontier = frontier_append(frontier, leaf)
        assert frontier_root(frontier) == root(leaves[:n])
        assert len(frontier) == bin(n).count("1")


def test_the_leaderboard_is_recomputed_from_done_entries_only(log) -> None:
    entries = [*log, dict(entry(50), consensus={"status": "DISPUTED", "score": None})]
    board = leaderboard_from_log(rows(entries))
    acc, stats = board[(0, "arith")]
    assert acc.n_tasks == 3 and acc.n_samples == 6  # tasks 0, 3, 6
    assert stats.score == pytest.approx(0.5)


def test_a_deepen_entry_stays_off_the_recomputed_board(log) -> None:
    deepened = entry(51, score=1.0)
    deepened["task"] |= {"purpose": "deepen", "plan": "p" * 64}
    assert leaderboard_from_log(rows([*log, deepened])) == leaderboard_from_log(rows(log))


def _canary_entry(canary_score: float, passed: bool, outlier: bool) -> dict:
    scores = {1: 0.5, 2: 0.75, 3: 0.5, 4: canary_score}
    results = [
        {"id": i, "score": s, "counted": i != 4, "outlier": i == 4 and outlier}
        for i, s in scores.items()
    ]
    return {
        "index": 0,
        "entry": {
            "results": results,
            "consensus": {"status": "DONE", "agreeing": [1, 2, 3]},
            "canary": {"threshold": 0.5, "checks": [{"result_id": 4, "passed": passed}]},
        },
    }


def test_canary_verdicts_are_recomputed_from_the_entry():
    from quorumbench.core.publiclog import check_canaries

    assert check_canaries([_canary_entry(0.5, True, False)]) == []
    assert check_canaries([_canary_entry(0.0, False, True)]) == []
    # a failed canary logged as passed (or the reverse), or its mark changed
    assert "recomputed" in check_canaries([_canary_entry(0.0, True, False)])[0].what
    assert "recomputed" in check_canaries([_canary_entry(0.5, False, True)])[0].what
    assert "outlier mark" in check_canaries([_canary_entry(0.5, True, True)])[0].what
    counted = _canary_entry(0.5, True, False)
    counted["entry"]["results"][3]["counted"] = True
    assert "counted" in check_canaries([counted])[0].what
    missing = _canary_entry(0.5, True, False)
    missing["entry"]["canary"]["checks"][0]["result_id"] = 9
    assert "not among" in check_canaries([missing])[0].what


def _sample_canary_entry(canary_samples, passed: bool, tolerance=0.2, epsilon=0.01) -> dict:
    """A canary entry of the per-sample rule: three agreeing results, one canary."""
    truth = [1.0, 1.0, 0.0, 1.0, 0.0]
    vectors = {1: truth, 2: truth, 3: [1.0, 1.0, 0.0, 1.0, 1.0], 4: list(canary_samples)}
    results = [
        {
            "id": i,
            "score": sum(v) / len(v),
            "sample_scores": v,
            "counted": i != 4,
            "outlier": i == 4 and not passed,
        }
        for i, v in vectors.items()
    ]
    consensus = {
        "status": "DONE",
        "agreeing": [1, 2, 3],
        "sample_consensus": truth,
        "tolerance": tolerance,
        "epsilon": epsilon,
    }
    return {
        "index": 0,
        "entry": {
            "results": results,
            "consensus": consensus,
            "canary": {"threshold": 0.5, "checks": [{"result_id": 4, "passed": passed}]},
        },
    }


def test_canary_verdicts_are_recomputed_sample_by_sample_with_the_logged_tolerance():
    from quorumbench.core.publiclog import check_canaries

    one_off = [1.0, 1.0, 0.0, 1.0, 1.0]
    flipped = [0.0, 1.0, 1.0, 1.0, 0.0]  # the consensus score (0.6), two answers flipped
    assert check_canaries([_sample_canary_entry(one_off, True)]) == []
    assert check_canaries([_sample_canary_entry(flipped, False)]) == []
    # logged as passed, but two samples differ: the score rule alone would have agreed
    assert "recomputed" in check_canaries([_sample_canary_entry(flipped, True)])[0].what
    assert "recomputed" in check_canaries([_sample_canary_entry(one_off, False)])[0].what
    # the logged tolerance decides: at 0.4 two of five may differ
    assert check_canaries([_sample_canary_entry(flipped, True, tolerance=0.4)]) == []
    # a fractional score within the logged epsilon is the same value
    close = [1.0, 1.0, 0.004, 1.0, 0.004]
    assert check_canaries([_sample_canary_entry(close, True)]) == []
    assert "recomputed" in check_canaries([_sample_canary_entry(close, True, epsilon=0.0)])[0].what


@pytest.mark.parametrize(
    ("tolerance", "epsilon"), [(1.5, 0.01), (-0.1, 0.01), (0.2, 0.5), (0.2, None), ("0.2", 0.01)]
)
def test_an_impossible_logged_tolerance_is_reported(tolerance, epsilon):
    from quorumbench.core.publiclog import check_canaries

    entry = _sample_canary_entry([1.0, 1.0, 0.0, 1.0, 0.0], True, tolerance, epsilon)
    [problem] = check_canaries([entry])
    assert "impossible tolerance" in problem.what


def test_entries_without_a_canary_are_not_checked_for_one(log) -> None:
    # a plain entry has no canary key (and no "agreeing" list to check one against)
    wrong = dict(_canary_entry(0.5, False, False), index=len(log))
    found = [str(p) for p in check_canaries([*rows(log), wrong])]
    assert found == [f"entry {len(log)}, canary result 4: logged passed=False, recomputed not"]


@pytest.mark.parametrize(
    "agreeing",
    [
        pytest.param([], id="a disputed task agrees on nothing"),
        pytest.param([7, 8], id="its agreeing ids are not among its results"),
    ],
)
def test_a_canary_on_a_task_without_agreeing_results_is_reported(agreeing) -> None:
    logged = _canary_entry(0.5, True, False)
    logged["entry"]["consensus"]["agreeing"] = agreeing
    assert [str(p) for p in check_canaries([logged])] == [
        "entry 0, canary result 4: its task has no agreeing results"
    ]


# --- key rotations ------------------------------------------------------------------


class _Key:
    def __init__(self) -> None:
        self.private = Ed25519PrivateKey.generate()
        raw = self.private.public_key().public_bytes_raw()
        self.public = raw.hex()
        self.key_id = sha256_hex(raw)

    def sign(self, message: bytes) -> str:
        return self.private.sign(message).hex()


def _holds(message: bytes, signature_hex: str, public_hex: str) -> bool:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex)).verify(
            bytes.fromhex(signature_hex), message
        )
    except InvalidSignature:
        return False
    return True


def _rotation(old: _Key, new: _Key, size: int, root_hex: str) -> dict:
    statement = {
        "size": size,
        "root": root_hex,
        "timestamp": "2026-11-24T12:00:00+00:00",
        "old_key_id": old.key_id,
        "old_public_key": old.public,
        "new_key_id": new.key_id,
        "new_public_key": new.public,
    }
    message = rotation_message(statement)
    return {**statement, "old_signature": old.sign(message), "new_signature": new.sign(message)}


def _roots(n: int):
    roots = {size: f"{size:02x}" * 32 for size in range(n + 1)}
    return lambda size: roots.get(size)


def _current(key: _Key) -> dict:
    return {"public_key": key.public, "key_id": key.key_id}


def test_a_log_without_rotations_has_one_key_for_every_size() -> None:
    k = _Key()
    chain, problems = check_key_chain([], _current(k), k.public, _roots(3), _holds)
    assert problems == []
    assert chain.key_at(0) == chain.key_at(99) == k.key_id
    assert chain.public_keys() == {k.key_id: k.public}


def test_rotations_chain_from_the_pinned_key_to_the_current_one() -> None:
    a, b, c = _Key(), _Key(), _Key()
    roots = _roots(9)
    rotations = [_rotation(a, b, 2, roots(2)), _rotation(b, c, 5, roots(5))]
    chain, problems = check_key_chain(rotations, _current(c), a.public, roots, _holds)
    assert problems == []
    assert [chain.key_at(s) for s in (0, 2, 3, 5, 6, 9)] == [
        a.key_id,
        a.key_id,
        b.key_id,
        b.key_id,
        c.key_id,
        c.key_id,
    ]
    # a verifier that pinned the middle key follows the rest of the chain too
    assert check_key_chain(rotations, _current(c), b.public, roots, _holds)[1] == []


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (lambda r: r.update(old_signature="00" * 64), "the old key's signature does not verify"),
        (lambda r: r.update(new_signature="00" * 64), "the new key's signature does not verify"),
        (lambda r: r.update(size=4), "signature does not verify"),
        (lambda r: r.update(new_key_id="ab" * 32), "new key id is not the hash of the key"),
        (lambda r: r.update(root="cd" * 32), "names a root the entries do not give"),
    ],
)
def test_a_doctored_rotation_is_reported(break_it, expected) -> None:
    a, b = _Key(), _Key()
    roots = _roots(9)
    rotation = _rotation(a, b, 3, roots(3))
    break_it(rotation)
    _, problems = check_key_chain([rotation], _current(b), a.public, roots, _holds)
    assert any(expected in p.what for p in problems), problems


def test_a_key_swapped_without_a_rotation_signed_by_the_pinned_key_is_reported() -> None:
    a, b, mallory = _Key(), _Key(), _Key()
    roots = _roots(5)
    _, problems = check_key_chain([], _current(mallory), a.public, roots, _holds)
    assert [p.where for p in problems] == ["log key"]
    assert "no rotation signed by the pinned key" in problems[0].what
    # a rotation signed by a key that is not the pinned one does not help
    forged = [_rotation(b, mallory, 2, roots(2))]
    _, problems = check_key_chain(forged, _current(mallory), a.public, roots, _holds)
    assert any("no rotation signed by the pinned key" in p.what for p in problems)


def test_a_broken_chain_a_stale_current_key_and_a_rotation_past_the_log_are_reported() -> None:
    a, b, c, d = _Key(), _Key(), _Key(), _Key()
    roots = _roots(4)
    gap = [_rotation(a, b, 1, roots(1)), _rotation(c, d, 2, roots(2))]
    _, problems = check_key_chain(gap, _current(d), a.public, roots, _holds)
    assert any("does not start from the key before it" in p.what for p in problems)
    back = [_rotation(a, b, 3, roots(3)), _rotation(b, c, 1, roots(1))]
    _, problems = check_key_chain(back, _current(c), a.public, roots, _holds)
    assert any("goes back in the log" in p.what for p in problems)
    stale = [_rotation(a, b, 1, roots(1))]
    _, problems = check_key_chain(stale, _current(c), a.public, roots, _holds)
    assert any("not the last key of its rotations" in p.what for p in problems)
    beyond = [_rotation(a, b, 7, "ee" * 32)]
    _, problems = check_key_chain(beyond, _current(b), a.public, roots, _holds)
    assert any("beyond the log" in p.what for p in problems)


def test_check_log_refuses_a_head_signed_by_a_key_that_does_not_sign_its_size(log) -> None:
    found = check_log(rows(log), head(log), verify_sig, key_at=lambda size: "someone-else")
    assert [str(p) for p in found] == [
        f"tree head size {len(log)}: signed by a key that does not sign it"
    ]
    assert check_log(rows(log), head(log), verify_sig, key_at=lambda size: KEY_ID) == []


# --- consistency proofs between tree heads --------------------------------------------


def _flip(hex_hash: str) -> str:
    return f"{int(hex_hash[0], 16) ^ 1:x}{hex_hash[1:]}"


def _served_proof(log: list[dict], old_size: int) -> list[str]:
    return [node.hex() for node in consistency_proof([entry_leaf(e) for e in log], old_size)]


def test_an_honest_consistency_proof_between_two_heads_holds(log) -> None:
    assert check_consistency_proof(head(log, 3), head(log), _served_proof(log, 3)) is None


@pytest.mark.parametrize(
    ("doctor", "expected"),
    [
        pytest.param(
            lambda o, n, p: (o, n, [_flip(p[0]), *p[1:]]),
            "consistency proof does not lead to the old root",
            id="a flipped first node",
        ),
        pytest.param(
            lambda o, n, p: (o, n, [*p[:-1], _flip(p[-1])]),
            "consistency proof does not lead to the new root",
            id="a flipped last node",
        ),
        pytest.param(
            lambda o, n, p: (dict(o, root=_flip(o["root"])), n, p),
            "consistency proof does not lead to the old root",
            id="an old head from another history",
        ),
        pytest.param(
            lambda o, n, p: (o, n, p[:-1]),
            "consistency proof is shorter than needed",
            id="a truncated proof",
        ),
        pytest.param(
            lambda o, n, p: (o, n, [*p, p[-1]]),
            "consistency proof is longer than needed",
            id="a padded proof",
        ),
        pytest.param(lambda o, n, p: (o, n, []), "consistency proof is empty", id="no proof"),
        pytest.param(
            lambda o, n, p: (n, o, p), "sizes 7 -> 3: a log never shrinks", id="heads swapped"
        ),
        pytest.param(
            lambda o, n, p: (o, n, [p[0][:-2], *p[1:]]),
            "proof node is 31 bytes, not 32",
            id="a short node",
        ),
        pytest.param(
            lambda o, n, p: (o, n, ["zz" * 32, *p[1:]]),
            "non-hexadecimal number found in fromhex() arg at position 0",
            id="a node that is not hex",
        ),
        pytest.param(
            lambda o, n, p: (o, dict(n, root="g"), p),
            "non-hexadecimal number found in fromhex() arg at position 0",
            id="a root that is not hex",
        ),
    ],
)
def test_a_doctored_consistency_proof_or_head_is_reported(log, doctor, expected) -> None:
    old, new, served = doctor(head(log, 3), head(log), _served_proof(log, 3))
    problem = check_consistency_proof(old, new, served)
    assert str(problem) == f"tree heads {old['size']} -> {new['size']}: not consistent: {expected}"
