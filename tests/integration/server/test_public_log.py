"""The public log end to end: tasks finalized over HTTP, then ``quorumbench verify``.

A real server (uvicorn in a thread) on SQLite; three runner accounts reach consensus
through the API; the verifier downloads the log and the leaderboard over HTTP. Then
the database is tampered with behind the server's back, and the verifier must say
where.
"""

from __future__ import annotations

import json
import stat

import httpx
import pytest
from rich.console import Console
from sqlalchemy import select, update
from typer.testing import CliRunner

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.app import app as cli
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.canonical import predictions_digest
from quorumbench.core.merkle import root, verify_consistency, verify_inclusion
from quorumbench.core.publiclog import entry_leaf, head_message
from quorumbench.db.models import LeaderboardEntry, LogEntry, TreeHead
from quorumbench.services import publiclog

from ..signing import Keyring
from .conftest import fake_metadata, hub_ref

RUNNERS = ("r1", "r2", "r3")


@pytest.fixture
def server(ctx, people):
    ctx.inspector = lambda ref: fake_metadata(ref)
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as running:
        yield running


def finalize(
    server: EmbeddedServer, people: dict[str, str], model: int, score: float = 0.5
) -> None:
    """Register a model and let three runner accounts agree on its task (signed results)."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        keyring = Keyring(client.post, server.context.now)
        owner = {"Authorization": f"Bearer {people['owner']}"}
        registered = client.post("/v0/models", json={"ref": hub_ref(model)}, headers=owner)
        assert registered.status_code == 201
        for who in RUNNERS:
            auth = {"Authorization": f"Bearer {people[who]}"}
            lease = client.post("/v0/leases", json={"runner": who}, headers=auth).json()
            task = lease["task"]
            result = {
                "task_id": task["id"],
                "score": score,
                "n": task["n_samples"],
                "sample_ids": task["sample_ids"],
                "sample_scores": [score] * task["n_samples"],
                "sample_output_hashes": ["0" * 64] * task["n_samples"],
                "outputs_sha256": "a" * 64,
                "sample_predictions": [0] * task["n_samples"],
                "predictions_sha256": predictions_digest([0] * task["n_samples"]),
                "runtime_s": 1.0,
            }
            body = {
                "attempt": lease["attempt"],
                "result": result,
                "signature": keyring.sign(people[who], who, lease, result),
            }
            answer = client.post(
                f"/v0/leases/{lease['lease_id']}/result",
                params={"runner": who},
                json=body,
                headers=auth,
            )
            assert answer.status_code == 201, answer.text


def test_finalized_tasks_are_logged_with_signed_heads_and_valid_proofs(server, people, ctx):
    for model in (1, 2, 3):
        finalize(server, people, model)
    get = lambda path, **params: httpx.get(server.url + path, params=params).json()  # noqa: E731
    head = get("/v0/log/head")
    assert head["size"] == 3
    entries = get("/v0/log/entries")
    assert [e["index"] for e in entries] == [0, 1, 2]
    assert entries[0]["entry"]["consensus"]["status"] == "DONE"
    assert len(entries[0]["entry"]["results"]) == 3
    for e in entries:
        assert entry_leaf(e["entry"]).hex() == e["leaf_hash"]
        proof = get("/v0/log/proof/inclusion", index=e["index"], size=3)["proof"]
        verify_inclusion(
            bytes.fromhex(e["leaf_hash"]),
            e["index"],
            3,
            [bytes.fromhex(p) for p in proof],
            bytes.fromhex(head["root"]),
        )
    one = get("/v0/log/head", size=1)
    proof = get("/v0/log/proof/consistency", first=1, second=3)["proof"]
    verify_consistency(
        1,
        bytes.fromhex(one["root"]),
        3,
        bytes.fromhex(head["root"]),
        [bytes.fromhex(p) for p in proof],
    )
    key_file = ctx.settings.data_dir / "log-signing-key.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    bad = httpx.get(server.url + "/v0/log/proof/inclusion", params={"index": 3, "size": 3})
    assert bad.status_code == 404 and "out of range" in bad.json()["detail"]


def test_verify_passes_on_an_honest_server_and_remembers_what_it_saw(server, people, tmp_path):
    state = tmp_path / "verify-state.json"
    console = Console(record=True)
    finalize(server, people, 1)
    first = verify(server.url, state, console)
    assert first.problems == [] and first.size == 1 and first.rows_compared == 1
    finalize(server, people, 2, score=0.75)
    second = verify(server.url, state, console)
    assert second.problems == [] and second.size == 2 and second.heads_checked == 2
    saved = json.loads(state.read_text())
    assert [h["size"] for h in saved["heads"]] == [1, 2] and saved["public_key"]
    result = CliRunner().invoke(cli, ["verify", "--server", server.url, "--state", str(state)])
    assert result.exit_code == 0, result.output
    assert "everything verifies" in result.output


def test_verify_reports_an_altered_score_and_a_doctored_leaderboard(server, people, ctx, tmp_path):
    state = tmp_path / "verify-state.json"
    for model in (1, 2):
        finalize(server, people, model)
    assert verify(server.url, state, Console()).problems == []
    with ctx.db.write_connection() as conn:
        row = conn.execute(select(LogEntry.entry).where(LogEntry.leaf_index == 1)).one()
        doctored = json.loads(json.dumps(row.entry))
        doctored["consensus"]["score"] = 0.99
        conn.execute(update(LogEntry).where(LogEntry.leaf_index == 1).values(entry=doctored))
        conn.execute(
            update(LeaderboardEntry).where(LeaderboardEntry.model_id == 1).values(score=0.9)
        )
    found = [str(p) for p in verify(server.url, state, Console()).problems]
    assert "entry 1: content does not hash to its leaf (altered)" in found
    assert any(
        p.startswith("leaderboard arith, model 1: score 0.900000 != 0.500000") for p in found
    )
    result = CliRunner().invoke(cli, ["verify", "--server", server.url, "--state", str(state)])
    assert result.exit_code == 1
    assert "mismatch: entry 1" in result.output


def test_verify_recomputes_the_chance_levels_where_it_has_the_data(server, people, ctx, tmp_path):
    state = tmp_path / "verify-state.json"
    finalize(server, people, 1)
    report = verify(server.url, state, Console())
    assert report.problems == [] and report.chance_checked == 1  # arith: generated here
    with ctx.db.write_connection() as conn:  # a chance level the items do not have
        conn.execute(update(LeaderboardEntry).values(chance_sum=1.0))
    found = [str(p) for p in verify(server.url, state, Console()).problems]
    (problem,) = found  # the raw score and interval still agree
    assert problem.startswith(
        "leaderboard arith, model 1: chance 0.250000 != 0.000000; normalised 0.333333 != "
        "0.500000; normalised ci_low 0.000000 != 0.067586; normalised ci_high "
    )


def test_verify_reports_a_rewritten_history(server, people, ctx, tmp_path):
    state = tmp_path / "verify-state.json"
    finalize(server, people, 1)
    assert verify(server.url, state, Console()).problems == []
    # The operator swaps the first head's root (and re-signs nothing): the head that
    # the verifier saw before no longer matches what the server now proves.
    with ctx.db.write_connection() as conn:
        conn.execute(update(TreeHead).where(TreeHead.size == 1).values(root="ab" * 32))
        conn.execute(update(LogEntry).where(LogEntry.leaf_index == 0).values(leaf_hash="ab" * 32))
    found = [str(p) for p in verify(server.url, state, Console()).problems]
    assert any("signature does not verify" in p for p in found)
    assert "entry 0: content does not hash to its leaf (altered)" in found


def test_verify_rederives_sample_ids_once_the_epoch_is_over(server, people, ctx, clock, tmp_path):
    finalize(server, people, 1)
    finalize(server, people, 2)
    early = verify(server.url, tmp_path / "a.json", Console())
    assert early.samples_checked == 0
    assert early.samples_unchecked == {"epoch not over, seed not revealed yet": 2}
    clock.advance(2 * 3600)  # the epoch has ended: its seed is public
    honest = verify(server.url, tmp_path / "b.json", Console())
    assert honest.problems == [] and honest.samples_checked == 2
    assert honest.signatures_checked == 6 and honest.unsigned_results == 0

    # An operator holding the log key rewrites entry 0 with other samples and signs a
    # whole new history: hashes and signatures all hold, the samples give it away.
    signer = publiclog.signer_for(ctx)
    with ctx.db.write_connection() as conn:
        rows = conn.execute(select(LogEntry).order_by(LogEntry.leaf_index)).all()
        forged = json.loads(json.dumps(rows[0].entry))
        forged["task"]["sample_ids"] = list(reversed(forged["task"]["sample_ids"]))
        contents = [forged] + [r.entry for r in rows[1:]]
        leaves = [entry_leaf(e) for e in contents]
        conn.execute(
            update(LogEntry)
            .where(LogEntry.leaf_index == 0)
            .values(entry=forged, leaf_hash=leaves[0].hex())
        )
        for size in (1, 2):
            root_hex = root(leaves[:size]).hex()
            head = conn.execute(select(TreeHead).where(TreeHead.size == size)).one()
            message = head_message(size, root_hex, head.timestamp, head.key_id)
            conn.execute(
                update(TreeHead)
                .where(TreeHead.size == size)
                .values(root=root_hex, signature=signer.sign(message))
            )
    found = [str(p) for p in verify(server.url, tmp_path / "c.json", Console()).problems]
    epoch = forged["task"]["epoch"]
    assert f"entry 0: sample ids are not the ones epoch {epoch}'s seed gives for arith" in found
    # and the runners' signed results no longer match the task they claim to be about
    assert sum("do not hash to its payload_sha256" in p for p in found) == 3
    assert len(found) == 4


def test_verify_reports_a_result_whose_score_was_changed_after_it_was_signed(
    server, people, ctx, tmp_path
):
    # An operator holding the log key changes one runner's score and re-signs the
    # tree heads: the log hangs together, but that runner never signed this score.
    finalize(server, people, 1)
    signer = publiclog.signer_for(ctx)
    with ctx.db.write_connection() as conn:
        row = conn.execute(select(LogEntry)).one()
        forged = json.loads(json.dumps(row.entry))
        forged["results"][1]["score"] = 0.0
        leaf = entry_leaf(forged)
        conn.execute(update(LogEntry).values(entry=forged, leaf_hash=leaf.hex()))
        head = conn.execute(select(TreeHead).where(TreeHead.size == 1)).one()
        root_hex = root([leaf]).hex()
        message = head_message(1, root_hex, head.timestamp, head.key_id)
        conn.execute(
            update(TreeHead)
            .where(TreeHead.size == 1)
            .values(root=root_hex, signature=signer.sign(message))
        )
    found = [str(p) for p in verify(server.url, tmp_path / "s.json", Console()).problems]
    result_id = forged["results"][1]["id"]
    assert f"entry 0, result {result_id}: its fields do not hash to its payload_sha256" in found


def _rewrite_entry(ctx, change) -> dict:
    """An operator holding the log key rewrites entry 0 and re-signs its tree head."""
    signer = publiclog.signer_for(ctx)
    with ctx.db.write_connection() as conn:
        row = conn.execute(select(LogEntry)).one()
        forged = json.loads(json.dumps(row.entry))
        change(forged)
        leaf = entry_leaf(forged)
        conn.execute(update(LogEntry).values(entry=forged, leaf_hash=leaf.hex()))
        head = conn.execute(select(TreeHead).where(TreeHead.size == 1)).one()
        root_hex = root([leaf]).hex()
        message = head_message(1, root_hex, head.timestamp, head.key_id)
        conn.execute(
            update(TreeHead)
            .where(TreeHead.size == 1)
            .values(root=root_hex, signature=signer.sign(message))
        )
    return forged


def test_verify_recomputes_each_results_predictions_digest(server, people, ctx, tmp_path):
    finalize(server, people, 1)
    honest = verify(server.url, tmp_path / "p.json", Console())
    assert honest.problems == [] and honest.predictions_checked == 3
    assert honest.results_without_predictions == 0

    def doctor(entry):
        entry["results"][2]["sample_predictions"][0] = 1

    forged = _rewrite_entry(ctx, doctor)
    found = [str(p) for p in verify(server.url, tmp_path / "q.json", Console()).problems]
    where = f"entry 0, result {forged['results'][2]['id']}"
    assert found == [
        f"{where}: its fields do not hash to its payload_sha256",
        f"{where}: its sample_predictions do not hash to its predictions_sha256",
    ]
    result = CliRunner().invoke(
        cli, ["verify", "--server", server.url, "--state", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 1
    assert "3 runner signatures, 3 predictions digests" in result.output
    assert "do not hash to its predictions_sha256" in result.output


def test_results_stored_without_predictions_are_logged_without_them(server, people, ctx):
    # Results stored before results carried predictions have null columns, and were
    # signed without them: their entries leave both out (that such a signature still
    # verifies: tests/unit/core/test_publiclog_results.py). Nulling the predictions of a
    # newer result, signed with them, breaks its signature.
    from quorumbench.cli.verify_cmd import _runner_signature_holds
    from quorumbench.core.consensus import verdict_from_dict
    from quorumbench.core.publiclog import check_result_predictions, check_result_signatures
    from quorumbench.db.models import Result

    finalize(server, people, 1)
    with ctx.db.write_connection() as conn:
        logged = conn.execute(select(LogEntry.entry, LogEntry.task_id)).one()
        first = logged.entry["results"][0]["id"]
        conn.execute(
            update(Result)
            .where(Result.id == first)
            .values(sample_predictions=None, predictions_sha256=None)
        )
        verdict = verdict_from_dict(logged.entry["consensus"])
        entry = publiclog.log_entry(conn, logged.task_id, 1, verdict, ctx.now())
    assert "sample_predictions" not in entry["results"][0]
    assert "predictions_sha256" not in entry["results"][0]
    assert "sample_predictions" in entry["results"][1]
    rows = [{"index": 0, "entry": entry}]
    assert check_result_predictions(rows) == ([], 1)
    problems, _ = check_result_signatures(rows, _runner_signature_holds)
    assert [p.where for p in problems] == [f"entry 0, result {first}"]
