"""The public log's formats and the checks anyone can run on a downloaded copy.

Every finalized task is one log entry (canonical JSON, see ``docs/log.md``); its leaf
is ``leaf_hash(canonical_json(entry))``. After each append the server signs a tree
head: Ed25519 over :func:`head_message`, the canonical JSON of the log's name, the
size, the root, the time and the key id. :func:`check_log` recomputes everything
from the entries alone; signatures are checked by a function the caller passes in,
so this module stays free of any crypto library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from quorumbench.core.canonical import canonical_json, predictions_digest, sha256_hex
from quorumbench.core.consensus import canary_passes
from quorumbench.core.leaderboard import Accumulator, interval
from quorumbench.core.merkle import (
    ProofError,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
)
from quorumbench.core.signing import result_digest, result_message
from quorumbench.protocol import ResultPayload, TaskStatus

LOG_NAME = "quorumbench-log/v1"
PAYLOAD_FIELDS = tuple(
    name for name in ResultPayload.model_fields if name not in ("task_id", "sample_ids")
)
"""A result's submitted fields (``protocol.ResultPayload``) that a log entry's result
carries; its task's id and sample ids are the entry's task's. A field added after
protocol 1.0 is in an entry only when the result had it (the predictions: every result
submitted since migration 0010)."""
PREDICTION_FIELDS = ("sample_predictions", "predictions_sha256")


def is_task(row: Mapping[str, Any]) -> bool:
    """Whether a served log row (``{"index", "leaf_hash", "entry"}``) is a finalized
    task: the log also holds records that are not, a settled pool's (a top-level
    ``payout`` key, ``core/payouts.py``) and a closed edge task's (a top-level ``edge``
    key, ``core/edge.py``), which the task checks skip."""
    entry = row.get("entry")
    return isinstance(entry, Mapping) and "payout" not in entry and "edge" not in entry


def task_rows(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of ``entries`` that are finalized tasks (:func:`is_task`)."""
    return [row for row in entries if is_task(row)]


def entry_leaf(entry: Mapping[str, Any]) -> bytes:
    return leaf_hash(canonical_json(entry))


def head_message(size: int, root_hex: str, timestamp: str, key_id: str) -> bytes:
    """The bytes a tree head's signature covers."""
    return canonical_json(
        {"log": LOG_NAME, "size": size, "root": root_hex, "timestamp": timestamp, "key_id": key_id}
    )


ROTATION_FIELDS = (
    "size",
    "root",
    "timestamp",
    "old_key_id",
    "old_public_key",
    "new_key_id",
    "new_public_key",
)
"""What a key rotation statement says; the old and the new key both sign it."""


def rotation_message(rotation: Mapping[str, Any]) -> bytes:
    """The bytes both signatures of a key rotation cover: the log's name, the tree head
    (size, root) after which the new key signs, the time, and both keys."""
    return canonical_json({"log": LOG_NAME, "rotation": {k: rotation[k] for k in ROTATION_FIELDS}})


@dataclass(frozen=True)
class KeyChain:
    """The log's keys in order: (first tree size the key signs, key id, public key hex).

    The first key signs heads from size 0; a rotation at size ``s`` hands every head
    larger than ``s`` to the next key.
    """

    keys: tuple[tuple[int, str, str], ...]

    def key_at(self, size: int) -> str:
        """The id of the key that must sign the head of ``size``."""
        found = self.keys[0][1]
        for first, key_id, _ in self.keys:
            if first <= size:
                found = key_id
        return found

    def public_keys(self) -> dict[str, str]:
        return {key_id: public for _, key_id, public in self.keys}


def check_key_chain(
    rotations: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any],
    pinned_public: str | None,
    root_at: Callable[[int], str | None],
    verify: Callable[[bytes, str, str], bool],
) -> tuple[KeyChain, list[Problem]]:
    """Follow the served key rotations from the first key to ``current``.

    Each rotation must be signed by its old and its new key (``verify(message,
    signature_hex, public_key_hex)``), start where the previous one ended, and name a
    tree head that the downloaded entries give (``root_at(size)`` is their root of the
    first ``size`` entries, None when there are fewer). The last key must be the one
    the server serves now, and a key this verifier pinned earlier must be in the chain:
    a key that changed without a rotation signed by the old key is reported.
    """
    problems: list[Problem] = []
    first_public = rotations[0]["old_public_key"] if rotations else current["public_key"]
    keys: list[tuple[int, str, str]] = [(0, sha256_hex(bytes.fromhex(first_public)), first_public)]
    for number, rotation in enumerate(rotations, start=1):
        where = f"log key rotation {number} (at size {rotation['size']})"
        for side in ("old", "new"):
            public = rotation[f"{side}_public_key"]
            if sha256_hex(bytes.fromhex(public)) != rotation[f"{side}_key_id"]:
                problems.append(Problem(where, f"{side} key id is not the hash of the key"))
            if not verify(rotation_message(rotation), rotation[f"{side}_signature"], public):
                problems.append(Problem(where, f"the {side} key's signature does not verify"))
        if rotation["old_public_key"] != keys[-1][2]:
            problems.append(Problem(where, "does not start from the key before it"))
        if rotation["size"] + 1 < keys[-1][0]:
            problems.append(Problem(where, "goes back in the log"))
        logged = root_at(rotation["size"])
        if logged is None:
            problems.append(Problem(where, "names a tree size beyond the log (it shrank?)"))
        elif logged != rotation["root"]:
            problems.append(Problem(where, "names a root the entries do not give"))
        keys.append((rotation["size"] + 1, rotation["new_key_id"], rotation["new_public_key"]))
    if keys[-1][2] != current["public_key"]:
        problems.append(Problem("log key", "the served key is not the last key of its rotations"))
    if pinned_public is not None and pinned_public not in {public for *_, public in keys}:
        problems.append(
            Problem(
                "log key",
                "differs from the key pinned on the first run, and no rotation signed by "
                "the pinned key leads to it",
            )
        )
    return KeyChain(tuple(keys)), problems


def frontier_append(frontier: list[tuple[int, bytes]], leaf: bytes) -> list[tuple[int, bytes]]:
    """Add a leaf to a compact range: the (size, hash) of the perfect subtrees that
    make up the tree, largest first. O(log n) per leaf."""
    out = [*frontier, (1, leaf)]
    while len(out) >= 2 and out[-1][0] == out[-2][0]:
        (size, left), (_, right) = out[-2], out[-1]
        out[-2:] = [(2 * size, node_hash(left, right))]
    return out


def frontier_root(frontier: Sequence[tuple[int, bytes]]) -> bytes:
    """The RFC 6962 root of the tree a compact range describes."""
    if not frontier:
        return root([])
    acc = frontier[-1][1]
    for _, subtree in reversed(frontier[:-1]):
        acc = node_hash(subtree, acc)
    return acc


@dataclass(frozen=True)
class Problem:
    """One mismatch the checks found, with the entry or tree head it is about."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def check_log(
    entries: Sequence[Mapping[str, Any]],
    head: Mapping[str, Any],
    verify_signature: Callable[[bytes, str, str], bool],
    seen_heads: Sequence[Mapping[str, Any]] = (),
    key_at: Callable[[int], str] | None = None,
) -> list[Problem]:
    """Every problem with a downloaded log; an empty list when it all holds.

    ``entries`` are the served rows (``index``, ``leaf_hash``, ``entry``) in order,
    ``head`` the newest signed tree head, ``seen_heads`` heads this verifier saw
    before (its memory between runs). ``verify_signature(message, signature_hex,
    key_id)`` says whether the signature is that log key's; ``key_at(size)``, when
    given, names the key that must have signed the head of that size (after key
    rotations, see :class:`KeyChain`).
    """
    problems: list[Problem] = []
    heads = [*seen_heads, head]
    for h in heads:
        if key_at is not None and h["key_id"] != key_at(h["size"]):
            problems.append(
                Problem(f"tree head size {h['size']}", "signed by a key that does not sign it")
            )
            continue
        message = head_message(h["size"], h["root"], h["timestamp"], h["key_id"])
        if not verify_signature(message, h["signature"], h["key_id"]):
            problems.append(Problem(f"tree head size {h['size']}", "signature does not verify"))
    leaves: list[bytes] = []
    for position, row in enumerate(entries):
        where = f"entry {position}"
        if row.get("index") != position:
            problems.append(Problem(where, f"served as index {row.get('index')} (reordered?)"))
        leaf = entry_leaf(row["entry"])
        if leaf.hex() != row.get("leaf_hash"):
            problems.append(Problem(where, "content does not hash to its leaf (altered)"))
        leaves.append(leaf)
    size = head["size"]
    if len(entries) != size:
        problems.append(Problem("log", f"{len(entries)} entries served, the head says {size}"))
    elif root(leaves).hex() != head["root"]:
        problems.append(Problem(f"tree head size {size}", "root differs from the entries'"))
    by_size: dict[int, str] = {}
    for h in heads:
        earlier = by_size.setdefault(h["size"], h["root"])
        if earlier != h["root"]:
            problems.append(Problem(f"tree head size {h['size']}", "two roots for one size"))
        if h is head:
            continue  # its root was checked against all the entries above
        if h["size"] > len(leaves):
            problems.append(Problem(f"tree head size {h['size']}", "the log shrank since"))
            continue
        if root(leaves[: h["size"]]).hex() != h["root"]:
            problems.append(
                Problem(f"tree head size {h['size']}", "history rewritten: entries differ")
            )
    return problems


def check_result_signatures(
    entries: Sequence[Mapping[str, Any]], verify: Callable[[bytes, str, str], bool]
) -> tuple[list[Problem], int]:
    """Check every result's runner signature in ``entries``; (problems, unsigned results).

    The signed message is rebuilt from the entry alone (core/signing.py);
    ``verify(message, signature_hex, public_key_hex)`` says whether it holds.
    """
    problems: list[Problem] = []
    unsigned = 0
    for row in task_rows(entries):
        entry = row["entry"]
        task, bench = entry["task"], entry["task"]["benchmark"]
        for result in entry["results"]:
            where = f"entry {row.get('index')}, result {result.get('id')}"
            sig = result.get("signature")
            if sig is None:
                unsigned += 1
                continue
            if sha256_hex(bytes.fromhex(sig["public_key"])) != sig["key_id"]:
                problems.append(Problem(where, "key id is not the hash of the public key"))
                continue
            fields = {name: result[name] for name in PAYLOAD_FIELDS if name in result}
            try:
                payload = ResultPayload.model_validate(
                    {**fields, "task_id": task["id"], "sample_ids": task["sample_ids"]}
                )
            except ValidationError as exc:
                problems.append(Problem(where, f"its fields are not a result: {_first(exc)}"))
                continue
            digest = result_digest(payload)
            if digest != result["payload_sha256"]:
                problems.append(Problem(where, "its fields do not hash to its payload_sha256"))
                continue
            message = result_message(
                task_id=task["id"],
                lease_id=result["lease_id"],
                attempt=result["attempt"],
                model_ref=task["model"]["ref"],
                benchmark=bench["name"],
                benchmark_version=bench["version"],
                dataset_sha256=bench["dataset_sha256"],
                result_sha256=digest,
                signed_at=sig["signed_at"],
            )
            if not verify(message, sig["value"], sig["public_key"]):
                problems.append(Problem(where, "the runner's signature does not verify"))
    return problems, unsigned


def _first(exc: ValidationError) -> str:
    """A validation error's first complaint: where, and what."""
    error = exc.errors()[0]
    return f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"


def check_result_predictions(entries: Sequence[Mapping[str, Any]]) -> tuple[list[Problem], int]:
    """Recompute each result's ``predictions_sha256`` from its logged
    ``sample_predictions``; (problems, results logged without predictions).

    Results submitted before predictions existed have neither field and are counted,
    not reported. A result's prediction count must be its ``n``.
    """
    problems: list[Problem] = []
    without = 0
    for row in task_rows(entries):
        for result in row["entry"]["results"]:
            where = f"entry {row.get('index')}, result {result.get('id')}"
            present = [name for name in PREDICTION_FIELDS if name in result]
            if not present:
                without += 1
                continue
            if len(present) != len(PREDICTION_FIELDS):
                problems.append(Problem(where, f"has {present[0]} alone"))
                continue
            predictions = result["sample_predictions"]
            if not isinstance(predictions, list) or len(predictions) != result.get("n"):
                problems.append(Problem(where, "does not have one prediction per sample"))
            elif predictions_digest(predictions) != result["predictions_sha256"]:
                problems.append(
                    Problem(where, "its sample_predictions do not hash to its predictions_sha256")
                )
    return problems, without


def check_canaries(entries: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Re-check every canary verdict in ``entries`` from the entry alone.

    A canary's result is stored but never voted (``counted`` false); it passed when it
    would have joined the agreeing results: its score within the logged threshold of
    theirs and, when the consensus logs a per-sample ``tolerance`` (and ``epsilon``),
    its ``sample_scores`` differing from ``sample_consensus`` on at most that share of
    the samples. Entries logged before the per-sample rule have no tolerance and are
    checked on scores only.
    """
    problems: list[Problem] = []
    for row in task_rows(entries):
        entry = row["entry"]
        canary = entry.get("canary")
        if not canary:
            continue
        consensus = entry["consensus"]
        tolerance, epsilon = consensus.get("tolerance"), consensus.get("epsilon")
        if tolerance is not None and not _valid_rule(tolerance, epsilon):
            where = f"entry {row.get('index')}"
            problems.append(Problem(where, "its consensus logs an impossible tolerance"))
            continue
        results = {r["id"]: r for r in entry["results"]}
        agreeing = [results[i]["score"] for i in consensus["agreeing"] if i in results]
        for check in canary["checks"]:
            where = f"entry {row.get('index')}, canary result {check.get('result_id')}"
            result = results.get(check["result_id"])
            if result is None:
                problems.append(Problem(where, "not among the entry's results"))
            elif result["counted"]:
                problems.append(Problem(where, "counted toward consensus"))
            elif not agreeing:
                problems.append(Problem(where, "its task has no agreeing results"))
            elif (
                canary_passes(
                    agreeing,
                    result["score"],
                    canary["threshold"],
                    sample_scores=result.get("sample_scores", ()),
                    sample_consensus=consensus.get("sample_consensus", ()),
                    tolerance=tolerance,
                    epsilon=epsilon,
                )
                != check["passed"]
            ):
                problems.append(Problem(where, f"logged passed={check['passed']}, recomputed not"))
            elif result["outlier"] == check["passed"]:
                problems.append(Problem(where, "its outlier mark contradicts the check"))
    return problems


def _valid_rule(tolerance: Any, epsilon: Any) -> bool:
    """Whether a logged per-sample tolerance and epsilon are numbers the rule accepts."""
    numbers = all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in (tolerance, epsilon)
    )
    return numbers and 0 <= tolerance <= 1 and 0 <= epsilon < 0.5


def check_consistency_proof(
    old: Mapping[str, Any], new: Mapping[str, Any], proof_hex: Sequence[str]
) -> Problem | None:
    """A served consistency proof between two heads, checked."""
    try:
        verify_consistency(
            old["size"],
            bytes.fromhex(old["root"]),
            new["size"],
            bytes.fromhex(new["root"]),
            [bytes.fromhex(p) for p in proof_hex],
        )
    except (ProofError, ValueError) as exc:
        return Problem(f"tree heads {old['size']} -> {new['size']}", f"not consistent: {exc}")
    return None


def leaderboard_from_log(entries: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str], Any]:
    """Per (model id, benchmark name): the leaderboard numbers the DONE entries give
    (running sums, and the row's score and exact interval from ``core.leaderboard``, as
    the server computes them)."""
    sums: dict[tuple[int, str], Accumulator] = {}
    for row in task_rows(entries):
        entry = row["entry"]
        consensus = entry["consensus"]
        if consensus["status"] != TaskStatus.DONE:
            continue
        task = entry["task"]
        if task.get("purpose", "epoch") != "epoch":
            continue  # a deepen task: samples chosen by label, never on the board
        key = (task["model"]["id"], task["benchmark"]["name"])
        samples = list(consensus["sample_consensus"]) or [consensus["score"]] * task["n_samples"]
        before = sums.get(key, Accumulator(0, 0, 0.0, 0.0, 0.0))
        sums[key] = before.add_task(consensus["score"], samples)
    return {key: (acc, interval(acc)) for key, acc in sums.items()}
