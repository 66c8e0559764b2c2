"""``quorumbench verify``: check a server's public log and leaderboard from outside.

It downloads the signing key, the newest tree head and every entry, then checks,
from the entries alone: each head's Ed25519 signature, each entry's leaf, the root,
every head it saw on earlier runs (same size, same root; the log never shrinks; the
served consistency proof holds), a served inclusion proof, each result's runner
signature and predictions digest, every settled pool's payout (recomputed from the
standing, rule and funds its record logs, ``core/payouts.check_payouts``; a standing
taken on a held-out final split, from the logged held-out tasks,
``core/held_out.check_held_out``), and the
leaderboard, recomputed from the DONE
entries and compared row by row with the server's (the raw score and interval; where
the benchmark's data is here, also the chance level from the entries' sample ids and
the chance-corrected score) (a model the server says is retired,
in ``GET /v0/models/{id}``, must be off its board instead). What
it saw is kept in a state file for the next run (the key is pinned on first use, and
a later key is accepted only through rotations signed by the key before it).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from rich.console import Console
from rich.progress import Progress

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.edge import check_edge_reports
from quorumbench.core.held_out import check_held_out
from quorumbench.core.merkle import ProofError, root, verify_inclusion
from quorumbench.core.payouts import check_payouts
from quorumbench.core.pillars import corrected
from quorumbench.core.publiclog import (
    Problem,
    check_canaries,
    check_consistency_proof,
    check_key_chain,
    check_log,
    check_result_predictions,
    check_result_signatures,
    entry_leaf,
    leaderboard_from_log,
    task_rows,
)
from quorumbench.errors import ConfigError, QuorumError

PAGE = 1000
SCORE_TOLERANCE = 1e-9


def default_state_file(server: str) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", server.split("://", 1)[-1]).strip("_")
    return base / "quorumbench" / "verify" / f"{name}.json"


@dataclass
class Report:
    entries: int = 0
    size: int = 0
    heads_checked: int = 0
    rows_compared: int = 0
    signatures_checked: int = 0
    unsigned_results: int = 0
    predictions_checked: int = 0
    """Results whose ``predictions_sha256`` was recomputed from their predictions."""
    results_without_predictions: int = 0
    """Results submitted before results carried their predictions."""
    samples_checked: int = 0
    chance_checked: int = 0
    """Benchmark rows whose chance level and chance-corrected score were recomputed from
    the log's sample ids and the benchmark's data here."""
    key_rotations: int = 0
    """Rotations of the log's key followed (each signed by the old and the new key)."""
    retired_models: set[int] = field(default_factory=set)
    """Models in the log, off the server's board, that the server says are retired."""
    samples_unchecked: dict[str, int] = field(default_factory=dict)
    """Entries whose sample ids could not be re-derived here, by reason."""
    payouts_checked: int = 0
    """Settled pools' payout records whose amounts were recomputed."""
    edge_signatures_checked: int = 0
    """Edge reports whose figures were recomputed from their runs and signature checked."""
    problems: list[Problem] = field(default_factory=list)


class _Server:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, timeout=60.0)

    def get(self, path: str, **params: Any) -> Any:
        found = self.get_optional(path, **params)
        if found is None:
            raise QuorumError(f"{self.url}{path} answered HTTP 404")
        return found

    def get_optional(self, path: str, **params: Any) -> Any:
        """The JSON at ``path``, or None when the server has no such thing (404)."""
        try:
            response = self.client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ConfigError(f"cannot reach {self.url}: {type(exc).__name__}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise QuorumError(f"{self.url}{path} answered HTTP {response.status_code}")
        return response.json()


def _runner_signature_holds(message: bytes, signature_hex: str, public_hex: str) -> bool:
    """libsodium's verification (strict: small-order points, non-canonical S refused)."""
    try:
        VerifyKey(bytes.fromhex(public_hex)).verify(message, bytes.fromhex(signature_hex))
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def _log_signature_holds(message: bytes, signature_hex: str, public_hex: str) -> bool:
    """Ed25519 with the public key ``public_hex`` (the log's keys, rotations)."""
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex))
        key.verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _signature_checker(keys: Mapping[str, str]) -> Any:
    """Checks a tree head's signature with the key of its ``key_id`` (one of ``keys``)."""

    def check(message: bytes, signature_hex: str, signed_by: str) -> bool:
        public = keys.get(signed_by)
        return public is not None and _log_signature_holds(message, signature_hex, public)

    return check


def verify(
    server_url: str, state_file: Path, console: Console, datasets_dir: Path | None = None
) -> Report:
    """Run every check against ``server_url``; the state file is updated at the end."""
    server = _Server(server_url)
    try:
        return _verify(server, state_file, console, datasets_dir)
    finally:
        server.client.close()


def _verify(
    server: _Server, state_file: Path, console: Console, datasets_dir: Path | None
) -> Report:
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    report = Report()
    key = server.get("/v0/log/key")
    if sha256_hex(bytes.fromhex(key["public_key"])) != key["key_id"]:
        report.problems.append(Problem("log key", "key id is not the hash of the key"))
    pinned = state.get("public_key")
    keys = server.get_optional("/v0/log/keys") or {"rotations": []}
    head = server.get("/v0/log/head")
    entries: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("downloading the log", total=head["size"] or 1)
        while len(entries) < head["size"]:
            page = server.get("/v0/log/entries", start=len(entries), limit=PAGE)
            if not page:
                break
            entries.extend(page)
            progress.update(bar, completed=len(entries))
    entries = entries[: head["size"]] if len(entries) > head["size"] else entries
    seen: list[dict[str, Any]] = state.get("heads", [])
    report.entries, report.size, report.heads_checked = len(entries), head["size"], len(seen) + 1
    leaves = [entry_leaf(row["entry"]) for row in entries]

    def root_at(size: int) -> str | None:
        return root(leaves[:size]).hex() if size <= len(leaves) else None

    chain, problems = check_key_chain(keys["rotations"], key, pinned, root_at, _log_signature_holds)
    report.problems += problems
    report.key_rotations = len(keys["rotations"])
    checker = _signature_checker(chain.public_keys())
    report.problems += check_log(entries, head, checker, seen, key_at=chain.key_at)
    for old in seen[-1:]:  # the newest head seen before: ask the server to prove it
        if 0 < old["size"] <= head["size"]:
            proof = server.get("/v0/log/proof/consistency", first=old["size"], second=head["size"])
            problem = check_consistency_proof(old, head, proof["proof"])
            if problem:
                report.problems.append(problem)
    if entries and len(entries) == head["size"]:
        _check_inclusion(server, entries[-1], head, report)
    tasks = [dict(row) for row in task_rows(entries)]  # the log's other records: payouts
    _check_leaderboard(server, tasks, report, _ChanceLevels(datasets_dir))
    _check_samples(server, tasks, report, datasets_dir)
    problems, report.unsigned_results = check_result_signatures(tasks, _runner_signature_holds)
    report.problems += problems
    problems, report.results_without_predictions = check_result_predictions(tasks)
    report.problems += problems
    report.problems += check_canaries(tasks)
    report.problems += [Problem("payouts", what) for what in check_payouts(entries)]
    held_out, _ = check_held_out(entries)
    report.problems += [Problem("payouts", what) for what in held_out]
    report.payouts_checked = sum(1 for row in entries if "payout" in row["entry"])
    edge_problems, report.edge_signatures_checked = check_edge_reports(
        entries, _runner_signature_holds
    )
    report.problems += [Problem("edge", what) for what in edge_problems]
    n_results = sum(len(row["entry"]["results"]) for row in tasks)
    report.signatures_checked = n_results - report.unsigned_results
    report.predictions_checked = n_results - report.results_without_predictions
    if not any(p.where.startswith("log key") for p in report.problems):
        state_file.parent.mkdir(parents=True, exist_ok=True)
        heads = [h for h in seen if h["size"] != head["size"]] + [head]
        pin = {"public_key": key["public_key"], "heads": heads[-50:]}
        state_file.write_text(json.dumps(pin, indent=1))
    return report


def _check_inclusion(
    server: _Server, row: Mapping[str, Any], head: Mapping[str, Any], report: Report
) -> None:
    index = row["index"]
    proof = server.get("/v0/log/proof/inclusion", index=index, size=head["size"])
    try:
        verify_inclusion(
            entry_leaf(row["entry"]),
            index,
            head["size"],
            [bytes.fromhex(p) for p in proof["proof"]],
            bytes.fromhex(head["root"]),
        )
    except (ProofError, ValueError) as exc:
        report.problems.append(Problem(f"entry {index}", f"inclusion proof fails: {exc}"))


class _ChanceLevels:
    """The chance levels of the log's DONE tasks, from the benchmarks' data here (a
    benchmark that cannot be loaded here, or of another version, gives None)."""

    def __init__(self, datasets_dir: Path | None) -> None:
        self.datasets_dir = datasets_dir
        self.benches: dict[str, Any] = {}

    def _bench(self, spec: Mapping[str, Any]) -> Any:
        from quorumbench.benchmarks import load_benchmark
        from quorumbench.evaluation.benchmark import BenchmarkContext

        name = spec["name"]
        if name not in self.benches:
            try:
                self.benches[name] = load_benchmark(name, BenchmarkContext(self.datasets_dir))
            except QuorumError:
                self.benches[name] = None
        bench = self.benches[name]
        if bench is None or (bench.version, bench.dataset_sha256) != (
            spec["version"],
            spec["dataset_sha256"],
        ):
            return None
        return bench

    def sums(self, entries: list[dict[str, Any]]) -> dict[tuple[int, str], float | None]:
        """Per (model id, benchmark name): the sum of its DONE tasks' chance levels."""
        out: dict[tuple[int, str], float | None] = {}
        for row in entries:
            entry = row["entry"]
            if entry["consensus"]["status"] != "DONE":
                continue
            task = entry["task"]
            key = (task["model"]["id"], task["benchmark"]["name"])
            bench = self._bench(task["benchmark"])
            found: float | None = None
            if bench is not None:
                try:
                    found = sum(s.chance for s in bench.samples(task["sample_ids"]))
                except (KeyError, IndexError, ValueError, QuorumError):
                    found = None
            before = out.get(key, 0.0)
            out[key] = None if before is None or found is None else before + found
        return out


def _check_chance(
    row: Mapping[str, Any], chance_sum: float | None, acc: Any, stats: Any
) -> list[str]:
    """Differences in a row's chance level and chance-corrected score (none when either
    side does not know its chance level)."""
    if chance_sum is None or row.get("chance") is None or not row.get("normalised"):
        return []
    chance = min(max(chance_sum / acc.n_samples, 0.0), 1.0)
    ours = corrected(stats, chance)
    theirs = row["normalised"]
    return [
        f"{what} {theirs_v:.6f} != {ours_v:.6f}"
        for what, theirs_v, ours_v in (
            ("chance", row["chance"], chance),
            ("normalised", theirs["score"], ours.score),
            ("normalised ci_low", theirs["ci_low"], ours.ci_low),
            ("normalised ci_high", theirs["ci_high"], ours.ci_high),
        )
        if abs(theirs_v - ours_v) > SCORE_TOLERANCE
    ]


def _check_leaderboard(
    server: _Server, entries: list[dict[str, Any]], report: Report, levels: _ChanceLevels
) -> None:
    expected = leaderboard_from_log(entries)
    chances = levels.sums(entries)
    benchmarks = sorted(_server_benchmarks(server))  # an inactive one has no leaderboard
    for name in benchmarks:
        rows: dict[int, Mapping[str, Any]] = {}
        offset = 0
        while True:
            page = server.get("/v0/leaderboard", benchmark=name, limit=1000, offset=offset)
            rows.update({r["model_id"]: r for r in page["rows"]})
            offset += len(page["rows"])
            if not page["rows"] or offset >= page["total"]:
                break
        mine = {model: v for (model, bench), v in expected.items() if bench == name}
        for model_id in sorted(set(rows) | set(mine)):
            where = f"leaderboard {name}, model {model_id}"
            if model_id not in mine:
                report.problems.append(Problem(where, "on the server, not in the log"))
                continue
            if model_id not in rows:
                if not _retired(server, model_id, report):
                    report.problems.append(Problem(where, "in the log, not on the server"))
                continue
            acc, stats = mine[model_id]
            row = rows[model_id]
            report.rows_compared += 1
            diffs = [
                f"{what} {theirs} != {ours}"
                for what, theirs, ours in (
                    ("n_tasks", row["n_tasks"], acc.n_tasks),
                    ("n_samples", row["n_samples"], acc.n_samples),
                )
                if theirs != ours
            ] + [
                f"{what} {theirs:.6f} != {ours:.6f}"
                for what, theirs, ours in (
                    ("score", row["score"], stats.score),
                    ("ci_low", row["ci_low"], stats.ci_low),
                    ("ci_high", row["ci_high"], stats.ci_high),
                )
                if abs(theirs - ours) > SCORE_TOLERANCE
            ]
            chance_diffs = _check_chance(row, chances.get((model_id, name)), acc, stats)
            if row.get("chance") is not None and chances.get((model_id, name)) is not None:
                report.chance_checked += 1
            diffs += chance_diffs
            if diffs:
                report.problems.append(Problem(where, "; ".join(diffs)))


def _retired(server: _Server, model_id: int, report: Report) -> bool:
    """Whether the server says the model, missing from a board, is retired (asked once
    per model: a retirement is public, on the model's own record)."""
    if model_id not in report.retired_models:
        model = server.get_optional(f"/v0/models/{model_id}")
        if model is None or not model.get("retired_at"):
            return False
        report.retired_models.add(model_id)
    return True


def _server_benchmarks(server: _Server) -> set[str]:
    return {b["name"] for b in server.get("/v0/benchmarks") if b.get("active", True)}


def _created_benchmark(server: _Server, name: str, context: Any) -> Any:
    """A benchmark created through the server's API: its spec from the server, its data
    from the spec's URL (checked against the SHA-256, cached); None if unavailable."""
    from quorumbench.benchmarks.custom import benchmark_from_spec, default_data_cache
    from quorumbench.evaluation.spec import parse_spec

    try:
        found = server.get_optional(f"/v0/benchmarks/{name}")
        if not found or not found.get("spec"):
            return None
        spec = parse_spec(found["spec"], f"{server.url}'s spec of {name}")
        return benchmark_from_spec(spec, context, cache_dir=default_data_cache())
    except QuorumError:
        return None


def _check_samples(
    server: _Server, entries: list[dict[str, Any]], report: Report, datasets_dir: Path | None
) -> None:
    """Re-derive each task's sample ids from its epoch's revealed seed and local data."""
    from quorumbench.benchmarks import load_benchmark
    from quorumbench.core.sampling import sample_ids
    from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext

    seeds: dict[int, str | None] = {}
    benches: dict[str, Benchmark | None] = {}
    context = BenchmarkContext(datasets_dir=datasets_dir)

    def skip(reason: str) -> None:
        report.samples_unchecked[reason] = report.samples_unchecked.get(reason, 0) + 1

    for row in entries:
        task = row["entry"]["task"]
        if task.get("purpose", "epoch") != "epoch":
            # a deepen task (a plan's labelled samples) or a pool's held-out task: not
            # drawn by the seed, and not on the leaderboard (recomputed without them)
            skip(
                "deepen task: samples chosen by a plan's labels, not by the epoch seed"
                if task.get("purpose") == "deepen"
                else "held-out pool task: the pool's items, not drawn by the epoch seed"
            )
            continue
        epoch_id = task["epoch"]
        if epoch_id not in seeds:
            epoch = server.get(f"/v0/epochs/{epoch_id}")
            seeds[epoch_id] = epoch["seed"]
            if epoch["seed"] is not None and sha256_hex(epoch["seed"]) != epoch["seed_commitment"]:
                report.problems.append(
                    Problem(f"epoch {epoch_id}", "revealed seed does not match its commitment")
                )
        seed = seeds[epoch_id]
        if seed is None:
            skip("epoch not over, seed not revealed yet")
            continue
        spec = task["benchmark"]
        name = spec["name"]
        if name not in benches:
            try:
                benches[name] = load_benchmark(name, context)
            except QuorumError:
                benches[name] = _created_benchmark(server, name, context)
        bench = benches[name]
        if bench is None:
            skip(f"benchmark {name} not available here")
            continue
        if (bench.version, bench.dataset_sha256) != (spec["version"], spec["dataset_sha256"]):
            skip(f"benchmark {name}: other version or data here")
            continue
        expected = sample_ids(
            bench.dataset_sha256, bench.version, seed, task["n_samples"], bench.sample_ids()
        )
        report.samples_checked += 1
        if expected != task["sample_ids"]:
            report.problems.append(
                Problem(
                    f"entry {row['index']}",
                    f"sample ids are not the ones epoch {epoch_id}'s seed gives for {name}",
                )
            )
