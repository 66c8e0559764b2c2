"""A pool's held-out final split on SQLite and PostgreSQL: committed at creation,
revealed as a spec at the end, evaluated by the runners through the queue and
consensus, the final standing computed on it (not on the pool board), paid out, and
recomputed from the public log; refusals that store nothing; the deadline."""

from __future__ import annotations

import copy
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from quorumbench import protocol
from quorumbench.backends.mock import MockBackend
from quorumbench.core.held_out import check_held_out
from quorumbench.db.models import TASK_POOL_FINAL, Benchmark, Task
from quorumbench.errors import (
    ChecksumMismatchError,
    ConflictError,
    DataUrlNotAllowedError,
    DuplicateBenchmarkError,
    InvalidSpecError,
    PermissionDeniedError,
)
from quorumbench.evaluation.engine import evaluate
from quorumbench.runner.evaluator import TaskEvaluator
from quorumbench.services import created_benchmarks, pools
from quorumbench.services.scheduler import tick

from .conftest import hub_ref
from .pool_world import DAY1, World, spec
from .test_api import auth, pull

ROWS = [{"id": f"f{i}", "q": f"{i} + 2?", "a": str(i + 2)} for i in range(50)]
DATA = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
SHA = hashlib.sha256(DATA).hexdigest()


class _Files(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"/final.jsonl": DATA, "/other.jsonl": DATA + b"\n"}.get(self.path)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def final_spec(url: str, sha: str = SHA) -> dict[str, Any]:
    return {
        "format": "exact-match",
        "data": {"url": url, "sha256": sha, "id_field": "id"},
        "prompt": {"version": 1, "template": "Q: {q}\nA:"},
        "answer_field": "a",
        "extract": {"kind": "number"},
        "compare": "number",
        "labels": {"skill": "reasoning", "subject": "science/math"},
    }


def _world(make_ctx, sums_spec, db_url, **overrides):
    settings = {
        "allow_private_data_urls": True,  # the data is on 127.0.0.1 here
        "pool_final_max_samples": 30,
        "pool_final_task_samples": 10,
        "pool_dispute_window_s": 3600,
    }
    return World(make_ctx, sums_spec, db_url, **(settings | overrides))


def _held_out_tasks(ctx, pool_id):
    with ctx.db.read() as session:
        return session.execute(
            select(Task.model_id, Task.part, Task.sample_ids, Task.priority, Task.status)
            .where(Task.pool_id == pool_id, Task.purpose == TASK_POOL_FINAL)
            .order_by(Task.model_id, Task.part)
        ).all()


def _log(world):
    return world.api.get("/v0/log/entries", params={"start": 0, "limit": 1000}).json()


def test_the_final_standing_is_computed_on_the_revealed_held_out_split(
    make_ctx, sums_spec, db_url, clock, files
):
    world = _world(make_ctx, sums_spec, db_url)
    try:
        ctx = world.ctx
        world.mint("funder", 1000)
        one = world.register(hub_ref(51), "ana")
        two = world.register(hub_ref(52), "ben")
        made = pools.create_pool(
            ctx, world.who("funder"), spec(final_sha256=SHA, rule="WinnerTakesAll")
        )
        assert made.final_state == "awaiting_reveal"
        pools.join_pool(ctx, world.who("ana"), made.id, str(one))
        pools.join_pool(ctx, world.who("ben"), made.id, str(two))
        board_scores = {one: 0.9, two: 0.1}  # ana leads the pool board...
        for day in range(3):
            clock.now = DAY1 + timedelta(days=day, seconds=5)
            tick(ctx)
            world.run_all(board_scores)
        assert [r.entry.model_id for r in pools.get_pool(ctx, made.id).board] == [one, two]

        url = f"{files}/final.jsonl"
        with pytest.raises(ConflictError, match="at the end"):
            pools.reveal_final(ctx, world.who("funder"), made.id, final_spec(url))
        clock.now = made.ends_at + timedelta(seconds=5)
        tick(ctx)  # not frozen on the board: the reveal window is open
        shown = pools.get_pool(ctx, made.id)
        assert shown.pool.final_state == "awaiting_reveal" and shown.payout_record is None
        with ctx.db.read() as session:
            assert session.scalar(select(func.count()).select_from(Benchmark)) == 1

        # refusals store nothing
        with pytest.raises(PermissionDeniedError):
            pools.reveal_final(ctx, world.who("ben"), made.id, final_spec(url))
        with pytest.raises(InvalidSpecError, match="committed to"):
            pools.reveal_final(ctx, world.who("funder"), made.id, final_spec(url, "d" * 64))
        with pytest.raises(ChecksumMismatchError):
            pools.reveal_final(
                ctx, world.who("funder"), made.id, final_spec(f"{files}/other.jsonl")
            )
        with pytest.raises(InvalidSpecError):
            pools.reveal_final(ctx, world.who("funder"), made.id, {"format": "exact-match"})
        with ctx.db.read() as session:
            assert session.scalar(select(func.count()).select_from(Benchmark)) == 1
        assert pools.get_pool(ctx, made.id).pool.final_url is None

        answer = world.api.post(
            f"/v0/pools/{made.id}/reveal",
            json={"spec": final_spec(url)},
            headers=auth(world.tokens["funder"]),
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["final_state"] == "evaluating"
        assert answer.json()["final_url"] == url
        with pytest.raises(ConflictError, match="already"):
            pools.reveal_final(ctx, world.who("funder"), made.id, final_spec(url))
        # the hidden benchmark: not scheduled by epochs, not on the board
        with ctx.db.read() as session:
            hidden = session.scalars(select(Benchmark).where(Benchmark.name != "sums")).one()
        assert hidden.name == f"pool-{made.id}-final" and hidden.active is False
        assert "pool-" not in json.dumps(world.api.get("/v0/leaderboard").json())

        clock.advance(60)
        tick(ctx)
        tasks = _held_out_tasks(ctx, made.id)
        assert [(t.model_id, t.part) for t in tasks] == [
            (m, p) for m in sorted([one, two]) for p in range(3)
        ]
        by_part = {}
        for t in tasks:  # both entries on the very same items, 10 per task
            assert len(t.sample_ids) == 10 and t.priority < 0
            by_part.setdefault(t.part, set()).add(tuple(t.sample_ids))
        assert all(len(ids) == 1 for ids in by_part.values())
        tick(ctx)  # idempotent: no second set
        assert len(_held_out_tasks(ctx, made.id)) == 6
        detail = world.api.get(f"/v0/pools/{made.id}").json()
        assert detail["final"]["state"] == "evaluating" and detail["final"]["tasks"] == 6
        assert detail["final"]["done"] == 0
        page = world.api.get(f"/pools/{made.id}").text
        assert "0 of 6 held-out tasks agreed" in page and url in page

        world.run_all({one: 0.2, two: 0.7})  # ...but ben is better on the held-out data
        clock.advance(60)
        tick(ctx)
        found = pools.get_pool(ctx, made.id)
        assert found.pool.final_state == "frozen"
        assert "the held-out one (6 of 6 tasks agreed)" in world.api.get(f"/pools/{made.id}").text
        assert [r.entry.model_id for r in found.board] == [two, one]
        assert [r.standing.n_samples for r in found.board] == [30, 30]
        assert [round(r.standing.score, 9) for r in found.board] == [0.7, 0.2]
        clock.advance(3600)
        tick(ctx)  # the dispute window has passed: settled
        assert world.balance("ben") == 1000 and world.balance("ana") == 0
        record = pools.get_pool(ctx, made.id).payout_record
        split = record["payout"]["final_split"]
        assert split["used"] is True and split["sha256"] == SHA and split["url"] == url
        assert split["benchmark"]["name"] == f"pool-{made.id}-final"
        assert len(split["tasks"]) == 6

        # anyone recomputes the held-out standing from the public log
        entries = _log(world)
        held = [e for e in entries if e["entry"].get("task", {}).get("purpose") == "pool_final"]
        assert len(held) == 6 and {e["entry"]["task"]["pool"] for e in held} == {made.id}
        assert check_held_out(entries) == ([], 1)
        forged = copy.deepcopy(entries)
        payout = next(e for e in forged if "payout" in e["entry"])["entry"]["payout"]
        payout["standing"][0]["score"] = 0.75
        payout["final_split"]["tasks"] = payout["final_split"]["tasks"][1:]
        problems, _ = check_held_out(forged)
        assert any("DONE by the cut-off but not counted" in p for p in problems)
        assert any("logged n_samples" in p or "logged score" in p for p in problems)
    finally:
        world.close()


def test_held_out_tasks_unfinished_at_the_deadline_and_a_private_url(
    make_ctx, sums_spec, db_url, clock, files, tmp_path
):
    world = _world(make_ctx, sums_spec, db_url, pool_final_eval_s=7200, pool_dispute_window_s=0)
    try:
        ctx = world.ctx
        world.mint("funder", 500)
        one = world.register(hub_ref(61), "ana")
        made = pools.create_pool(ctx, world.who("funder"), spec(funds=500, final_sha256=SHA))
        pools.join_pool(ctx, world.who("ana"), made.id, str(one))
        clock.now = made.ends_at + timedelta(seconds=5)
        tick(ctx)
        strict = make_ctx(db_url, benchmarks=[sums_spec], samples_per_task=4, epoch_seconds=86_400)
        with pytest.raises(DataUrlNotAllowedError):  # the SSRF guard without the test opt-in
            pools.reveal_final(
                strict, world.who("funder"), made.id, final_spec(f"{files}/final.jsonl")
            )
        pools.reveal_final(ctx, world.who("funder"), made.id, final_spec(f"{files}/final.jsonl"))
        tick(ctx)  # three tasks for ana, none evaluated
        assert len(_held_out_tasks(ctx, made.id)) == 3
        # a runner leases one first (before the epoch's task) and evaluates it from the
        # spec the lease carries, fetching the data by its URL into its own cache
        granted = pull(world.api, world.tokens, "r1").json()
        assert granted["task"]["benchmark"]["name"] == f"pool-{made.id}-final"
        evaluator = TaskEvaluator(allow_private_data_urls=True, data_cache_dir=tmp_path / "rc")
        prepared = evaluator.prepare(protocol.Task.model_validate(granted["task"]))
        answers = {f"Q: {r['q']}\nA:": r["a"] for r in ROWS}
        run = evaluate(
            prepared.benchmark,
            MockBackend(answer=lambda prompt: answers.get(prompt, "0")),
            prepared.config,
            samples=prepared.samples,
        )
        assert run.n == 10 and run.score == 1.0
        assert [s.fields["id"] for s in prepared.samples] == granted["task"]["sample_ids"]
        clock.advance(7199)
        tick(ctx)
        assert pools.get_pool(ctx, made.id).pool.final_state == "evaluating"
        clock.advance(2)
        tick(ctx)  # the deadline: frozen on what is final (nothing), so nobody is paid
        tick(ctx)
        found = pools.get_pool(ctx, made.id)
        assert found.pool.final_state == "frozen" and found.board == []
        assert found.pool.status == "settled" and world.balance("funder") == 500
        assert found.payout_record["payout"]["final_split"]["tasks"] == []
        # the hidden benchmark's name is reserved
        with pytest.raises(DuplicateBenchmarkError, match="reserved"):
            created_benchmarks._check_name(
                ctx, world.who("funder"), type("S", (), {"name": "pool-9-final", "version": 1})()
            )
    finally:
        world.close()


def test_a_cancelled_pool_reveals_nothing(make_ctx, sums_spec, db_url, clock, files):
    world = _world(make_ctx, sums_spec, db_url)
    try:
        ctx = world.ctx
        world.mint("funder", 100)
        made = pools.create_pool(ctx, world.who("funder"), spec(funds=100, final_sha256=SHA))
        pools.cancel_pool(ctx, world.who("admin"), made.id, "wrong benchmark")
        assert pools.get_pool(ctx, made.id).final.state == "cancelled"
        clock.now = made.ends_at + timedelta(seconds=5)
        with pytest.raises(ConflictError, match="cancelled"):
            pools.reveal_final(
                ctx, world.who("funder"), made.id, final_spec(f"{files}/final.jsonl")
            )
        assert "The pool was cancelled." in world.api.get(f"/pools/{made.id}").text
    finally:
        world.close()
