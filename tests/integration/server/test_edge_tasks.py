"""Edge tasks on SQLite and PostgreSQL, in process: which models the scheduler gives
one and how often, who may lease one and when, how a report is checked, stored, counted
and logged, how an open one is closed, and the figures per hardware class. The real
model runs them in tests/integration/runner/test_edge_tasks.py."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from nacl.signing import SigningKey
from rich.console import Console
from sqlalchemy import func, select, update

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.canonical import sha256_hex
from quorumbench.core.signing import message_for_task, result_digest
from quorumbench.db.edge_models import EdgeResult as EdgeRow
from quorumbench.db.models import TASK_EDGE, Benchmark, Lease, Model, Runner, Task
from quorumbench.errors import ConflictError, InvalidSubmissionError, LeaseExpiredError
from quorumbench.evaluation.edge import (
    EDGE_VERSION,
    EdgeResult,
    EdgeRun,
    EdgeSettings,
    workload_sha256,
)
from quorumbench.protocol import EdgeReport, ResultPayload, TaskStatus
from quorumbench.protocol import Task as ProtocolTask
from quorumbench.queue.base import Claim, Claimant
from quorumbench.runner.edge_task import edge_report
from quorumbench.services.accounts import authenticate_api_token, create_account, issue_token
from quorumbench.services.edge_board import edge_figures
from quorumbench.services.edge_results import submit_edge
from quorumbench.services.edge_tasks import EDGE_PRIORITY
from quorumbench.services.failures import report_failure
from quorumbench.services.models import owned_models, register_model
from quorumbench.services.results import submit_result
from quorumbench.services.runners import runner_for
from quorumbench.services.scheduler import tick

from ..signing import signature
from .conftest import fake_metadata, hub_ref
from .test_api import auth, payload

WORKLOAD = {
    "edge_prompt_tokens": 24,
    "edge_gen_tokens": 6,
    "edge_warmup": 0,
    "edge_min_runs": 2,
    "edge_min_time_s": 0.0,
    "edge_max_runs": 4,
}
SETTINGS = EdgeSettings(
    prompt_tokens=24, gen_tokens=6, warmup=0, min_runs=2, min_time_s=0.0, max_runs=4
)
EPOCH = 3600
RUNNERS = ("r1", "r2", "r3")


class Server:
    """A context with edge tasks every ``every`` epochs, an owner and runner accounts."""

    def __init__(self, make_ctx, db_url: str, every: int = 1, **overrides: Any) -> None:
        settings = {
            "edge_every_epochs": every,
            "edge_runners": 2,
            "registrations_per_week": 10,
            **WORKLOAD,
        }
        self.ctx = make_ctx(db_url, **(settings | overrides))
        self.tokens = {}
        for name in ("owner", *RUNNERS):
            create_account(self.ctx, name)
            self.tokens[name] = issue_token(self.ctx, name).token

    def register(self, ref: str, context_length: int | None = 2048) -> int:
        def inspector(parsed: Any) -> Any:
            meta = fake_metadata(str(parsed) if not isinstance(parsed, str) else parsed)
            return dataclasses.replace(meta, context_length=context_length)

        principal = authenticate_api_token(self.ctx, self.tokens["owner"])
        return register_model(self.ctx, principal, ref, inspector=inspector).id

    def runner(self, who: str, *, edge: bool = True, name: str = "box") -> Claimant:
        principal = authenticate_api_token(self.ctx, self.tokens[who])
        return dataclasses.replace(runner_for(self.ctx, principal, f"{who}-{name}"), edge=edge)

    def claim(self, claimant: Claimant) -> Claim | None:
        return self.ctx.queue.claim(claimant, self.ctx.now())

    def edge_tasks(self) -> list[Any]:
        with self.ctx.db.read() as session:
            return session.execute(
                select(Task.id, Task.model_id, Task.epoch_id, Task.status, Task.quorum)
                .where(Task.purpose == TASK_EDGE)
                .order_by(Task.id)
            ).all()


@pytest.fixture
def server(make_ctx, db_url):
    return Server(make_ctx, db_url)


def run(**changes: Any) -> EdgeRun:
    base = {
        "wall_s": 0.4,
        "generated_tokens": 6,
        "finish_reason": "length",
        "prompt_tokens": 24,
        "ttft_s": 0.1,
        "decode_tokens_per_s": 20.0,
        "peak_rss_bytes": 1_000,
    }
    return EdgeRun(**(base | changes))


def report(task_id: int, cpu: str = "Test CPU", speed: float = 20.0, **changes: Any) -> EdgeReport:
    """A runner's report of two runs on a machine with the CPU ``cpu``."""
    result = EdgeResult(
        model={"ref": "hf:test", "device": "cpu"},
        settings=SETTINGS,
        hardware={"cpu_model": cpu, "cpu_count": 2},
        hardware_class="",  # the server computes the class from the report's machine
        libraries={"python": "3.11"},
        runs=(run(decode_tokens_per_s=speed), run(wall_s=0.5, decode_tokens_per_s=speed + 2)),
    )
    body = edge_report(task_id, result).model_dump(mode="json")
    return EdgeReport.model_validate(body | changes)


def submit(server: Server, claimant: Claimant, claim: Claim, rep: EdgeReport | None = None):
    rep = rep or report(claim.task_id)
    return submit_edge(server.ctx, claimant, claim.lease_id, claim.attempt, rep)


def take_edge(server: Server, claimant: Claimant) -> Claim:
    """Claim until the edge task comes (scored tasks first); that claim."""
    for _ in range(50):
        claim = server.claim(claimant)
        assert claim is not None, "no edge task offered"
        if claim.task.benchmark.kind == "edge":
            return claim
    raise AssertionError("the edge task never came")


def test_local_models_that_fit_get_one_edge_task_per_period(make_ctx, db_url, clock):
    server = Server(make_ctx, db_url, every=2, allow_private_endpoints=True)
    local = server.register(hub_ref(1))
    server.register(hub_ref(2), context_length=29)  # 24 + 6 tokens do not fit
    fits = server.register(hub_ref(3), context_length=30)
    unknown = server.register(hub_ref(4), context_length=None)
    server.register("openai:http://127.0.0.1:9/v1#m")  # an endpoint's speed is not hardware
    tick(server.ctx)
    first = server.edge_tasks()
    assert [t.model_id for t in first] == [local, fits, unknown]
    assert {t.quorum for t in first} == {2}
    tick(server.ctx)  # idempotent within the epoch
    assert server.edge_tasks() == first
    clock.advance(EPOCH)
    tick(server.ctx)  # one epoch later: not due yet
    assert server.edge_tasks() == first
    clock.advance(EPOCH)
    tick(server.ctx)
    second = server.edge_tasks()[len(first) :]
    assert [t.model_id for t in second] == [local, fits, unknown]
    assert {t.epoch_id for t in second} == {first[0].epoch_id + 2}
    # nobody reported on the first ones: closed DISPUTED when the next were made
    assert {t.status for t in server.edge_tasks()[: len(first)]} == {TaskStatus.DISPUTED}
    assert {t.status for t in second} == {TaskStatus.PENDING}


def test_the_edge_benchmark_is_hidden_and_follows_the_repeat_rule(make_ctx, db_url, tmp_path):
    server = Server(make_ctx, db_url)
    server.register(hub_ref(5))
    tick(server.ctx)
    with server.ctx.db.read() as session:
        bench = session.scalars(select(Benchmark).where(Benchmark.kind == "edge")).one()
        assert (bench.name, bench.version, bench.active) == ("edge-24-6", EDGE_VERSION, False)
        assert bench.dataset_sha256 == workload_sha256()
        assert bench.config == SETTINGS.to_config()
        (edge_task,) = server.edge_tasks()
        priority = session.get_one(Task, edge_task.id).priority
    assert priority == EDGE_PRIORITY
    app = create_app(server.ctx.settings, context=server.ctx, run_scheduler=False)
    with TestClient(app) as api:
        listed = [b for b in api.get("/v0/benchmarks").json() if b["name"] == "edge-24-6"]
        assert all((b["kind"], b["active"], b["weight"]) == ("edge", False, 0) for b in listed)
        board = api.get("/v0/leaderboard", params={"benchmark": "edge-24-6"})
        assert board.status_code == 404 and "no active benchmark" in board.text
        shown = api.get(f"/v0/tasks/{edge_task.id}")
        assert shown.status_code == 200, shown.text
    # a changed repeat rule updates the workload's row; no second row
    again = make_ctx(db_url, edge_every_epochs=1, **(WORKLOAD | {"edge_max_runs": 9}))
    tick(again)
    with again.db.read() as session:
        rows = session.scalars(select(Benchmark).where(Benchmark.kind == "edge")).all()
    assert [r.config["max_runs"] for r in rows] == [9]


def test_edge_tasks_go_to_runners_that_run_them_after_the_scored_tasks(server):
    model = server.register(hub_ref(6))
    tick(server.ctx)
    later = server.register(hub_ref(16))
    tick(server.ctx)  # its scored tasks come after the first model's edge task
    old = server.runner("r1", edge=False)
    scored = []
    while (claim := server.claim(old)) is not None:
        assert claim.task.benchmark.kind is None
        scored.append(claim.task_id)
    assert scored  # every scored task, never the edge one
    new = server.runner("r2")
    claims = []
    while (claim := server.claim(new)) is not None:
        claims.append(claim)
    assert [c.task.benchmark.kind for c in claims] == [None] * len(scored) + ["edge"] * 2
    assert min(c.task_id for c in claims if c.task.model.id == later) > claims[-2].task_id
    edge = claims[-2].task
    assert [c.task.model.id for c in claims[-2:]] == [model, later] and edge.n_samples == 0
    assert edge.benchmark.config == SETTINGS.to_config()
    # an account takes one slot of it, as of any task
    assert server.claim(server.runner("r2", name="other")) is None


def test_a_report_is_checked_stored_counted_and_logged(server):
    server.register(hub_ref(7))
    tick(server.ctx)
    one, two = server.runner("r1"), server.runner("r2")
    first, second = take_edge(server, one), take_edge(server, two)
    task_id = first.task_id

    bad = report(task_id).model_dump(mode="json")
    bad["wall_s"]["mean"] = 9.0
    with pytest.raises(InvalidSubmissionError, match="wall_s is 9"):
        submit(server, one, first, EdgeReport.model_validate(bad))
    with pytest.raises(InvalidSubmissionError, match="task_id"):
        submit(server, one, first, report(task_id + 1000))

    made = submit(server, one, first)
    assert (made.task_status, made.duplicate) == (TaskStatus.PENDING, False)
    again = submit(server, one, first)
    assert (again.result_id, again.duplicate) == (made.result_id, True)
    with pytest.raises(ConflictError, match="different report"):
        submit(server, one, first, report(task_id, speed=30.0))

    done = submit(server, two, second, report(task_id, cpu="Other CPU", speed=40.0))
    assert done.task_status == TaskStatus.DONE
    with server.ctx.db.read() as session:
        stored = session.scalars(select(EdgeRow).order_by(EdgeRow.id)).all()
        assert [r.counted for r in stored] == [True, True]
        assert stored[0].hardware_class != stored[1].hardware_class
        assert session.get_one(Task, task_id).finalized_at is not None
    app = create_app(server.ctx.settings, context=server.ctx, run_scheduler=False)
    with TestClient(app) as api:
        log = api.get("/v0/log/entries", params={"start": 0, "limit": 100}).json()
    (logged,) = [row["entry"]["edge"] for row in log if "edge" in row["entry"]]
    assert logged["task"]["id"] == task_id and logged["task"]["status"] == "DONE"
    assert [r["payload_sha256"] for r in logged["reports"]] == [r.payload_sha256 for r in stored]
    assert all(r["signature"] is None for r in logged["reports"])  # sent unsigned here


def test_a_late_or_misdirected_submission_is_refused(server, clock):
    server.register(hub_ref(8))
    tick(server.ctx)
    one = server.runner("r1")
    scored = server.claim(one)
    assert scored is not None and scored.task.benchmark.kind is None
    with pytest.raises(InvalidSubmissionError, match="for a scored task"):
        submit(server, one, scored, report(scored.task_id))
    edge = take_edge(server, one)
    # a well-formed scored result (of the scored task's samples) sent on the edge lease
    body = payload({"attempt": edge.attempt, "task": scored.task.model_dump()}, 1.0)["result"]
    result = ResultPayload.model_validate(body | {"task_id": edge.task_id})
    with pytest.raises(InvalidSubmissionError, match="for an edge task"):
        submit_result(server.ctx, one, edge.lease_id, edge.attempt, result)
    with pytest.raises(LeaseExpiredError, match="attempt"):
        submit_edge(server.ctx, one, edge.lease_id, edge.attempt + 1, report(edge.task_id))
    clock.advance(server.ctx.settings.lease_seconds + 1)
    with pytest.raises(LeaseExpiredError, match="expired"):
        submit(server, one, edge)
    with server.ctx.db.read() as session:
        assert session.scalar(select(func.count()).select_from(EdgeRow)) == 0


def test_a_suspended_runners_report_is_kept_but_not_counted(server):
    server.register(hub_ref(9))
    tick(server.ctx)
    one = server.runner("r1")
    claim = take_edge(server, one)
    with server.ctx.db.write() as session:
        session.execute(update(Runner).where(Runner.id == one.runner_id).values(suspended=True))
    outcome = submit(server, one, claim)
    assert outcome.task_status == TaskStatus.PENDING
    with server.ctx.db.read() as session:
        (row,) = session.scalars(select(EdgeRow)).all()
        task = session.get_one(Task, claim.task_id)
    assert not row.counted and task.open_slots == 2  # its slot reopened
    assert edge_figures(server.ctx) == []
    two, three = server.runner("r2"), server.runner("r3")
    for claimant in (two, three):
        submit(server, claimant, take_edge(server, claimant))
    with server.ctx.db.read() as session:
        assert session.get_one(Task, claim.task_id).status == TaskStatus.DONE


def test_an_open_edge_task_with_reports_is_closed_done_when_the_next_is_made(
    make_ctx, db_url, clock
):
    server = Server(make_ctx, db_url, lease_seconds=2 * EPOCH)  # r2 holds its lease across
    server.register(hub_ref(10))
    tick(server.ctx)
    one, two = server.runner("r1"), server.runner("r2")
    first, held = take_edge(server, one), take_edge(server, two)
    submit(server, one, first)  # one report of the quorum of two
    clock.advance(EPOCH)
    tick(server.ctx)
    old, new = server.edge_tasks()
    assert (old.id, old.status, new.status) == (first.task_id, "DONE", "PENDING")
    app = create_app(server.ctx.settings, context=server.ctx, run_scheduler=False)
    with TestClient(app) as api:
        log = api.get("/v0/log/entries", params={"start": 0, "limit": 100}).json()
    (logged,) = [row["entry"]["edge"] for row in log if "edge" in row["entry"]]
    assert logged["task"]["id"] == old.id and len(logged["reports"]) == 1
    # r2's report comes after the close: kept, not counted (the log closed it without)
    late = submit(server, two, held, report(held.task_id, speed=99.0))
    assert late.task_status == TaskStatus.DONE
    with server.ctx.db.read() as session:
        rows = session.execute(select(EdgeRow.runner_id, EdgeRow.counted)).all()
        task = session.get_one(Task, old.id)
    assert sorted(rows) == [(one.runner_id, True), (two.runner_id, False)]
    assert (task.status, task.open_slots) == (TaskStatus.DONE, 0)
    (figures,) = edge_figures(server.ctx)
    assert figures.runners == 1 and figures.decode_tokens_per_s is not None
    assert figures.decode_tokens_per_s.high == 21.0


def test_failed_edge_tasks_do_not_pause_a_model(make_ctx, db_url, clock):
    server = Server(make_ctx, db_url, pause_after_failed_tasks=2, quorum=2)
    model = server.register(hub_ref(11))
    tick(server.ctx)
    one, two = server.runner("r1"), server.runner("r2")
    for claimant in (one, two):
        edge = take_edge(server, claimant)
        report_failure(server.ctx, claimant, edge.lease_id, edge.attempt, "out of memory")
    with server.ctx.db.read() as session:
        scored = session.scalars(
            select(Task.id).where(Task.model_id == model, Task.purpose != TASK_EDGE)
        ).first()
        held = session.execute(
            select(Lease.id, Lease.attempt, Lease.runner_id).where(
                Lease.task_id == scored, Lease.state == "ACTIVE"
            )
        ).all()
    for lease in held:  # one scored task fails too: one failure of a streak of two
        claimant = one if lease.runner_id == one.runner_id else two
        report_failure(server.ctx, claimant, lease.id, lease.attempt, "crashed")
    with server.ctx.db.read() as session:
        assert session.get_one(Model, model).paused_at is None


def test_edge_figures_take_each_runners_newest_report_with_the_spread(server, clock):
    model = server.register(hub_ref(12))
    tick(server.ctx)
    one, two, three = server.runner("r1"), server.runner("r2"), server.runner("r3")
    submit(server, one, claim := take_edge(server, one), report(claim.task_id, speed=10.0))
    submit(server, two, claim := take_edge(server, two), report(claim.task_id, speed=30.0))
    clock.advance(EPOCH)
    tick(server.ctx)
    submit(server, one, claim := take_edge(server, one), report(claim.task_id, speed=14.0))
    submit(server, three, claim := take_edge(server, three), report(claim.task_id, cpu="Big"))
    rows = edge_figures(server.ctx, model_id=model)
    assert [(r.hardware_class, r.runners) for r in rows] == [
        (rows[0].hardware_class, 1),
        (rows[1].hardware_class, 2),
    ]
    big, test_cpu = rows
    assert "big" in big.hardware_class.lower() and "test" in test_cpu.hardware_class.lower()
    decode = test_cpu.decode_tokens_per_s
    assert decode is not None  # r1's newest (15 = mean of 14 and 16), r2's (31)
    assert (decode.median, decode.low, decode.high, decode.n) == (23.0, 15.0, 31.0, 2)
    assert test_cpu.forced_length and test_cpu.peak_gpu_bytes is None
    assert edge_figures(server.ctx, hardware_class=big.hardware_class) == [big]
    assert edge_figures(server.ctx, model_id=model + 1) == []
    assert clock.now - test_cpu.latest_at < timedelta(seconds=1)


def _signed_edge(key: SigningKey, lease: dict[str, Any], rep: EdgeReport) -> dict[str, Any]:
    """The body of ``POST /v0/leases/{id}/edge``, signed as a runner signs it."""
    signed_at = datetime.now(UTC).isoformat()
    task = ProtocolTask.model_validate(lease["task"])
    message = message_for_task(
        task, lease["lease_id"], lease["attempt"], result_digest(rep), signed_at
    )
    return {
        "protocol_version": "1.2",
        "attempt": lease["attempt"],
        "result": rep.model_dump(mode="json"),
        "signature": {
            "key_id": sha256_hex(bytes(key.verify_key)),
            "signed_at": signed_at,
            "value": key.sign(message).signature.hex(),
        },
    }


def test_runners_of_protocol_1_2_get_sign_and_verify_edge_reports(
    make_ctx, db_url, clock, tmp_path
):
    """Over HTTP: a 1.1 runner is never leased the edge task; a 1.2 runner is, also as
    the next pull of a submission; the signed reports close it, and ``verify`` checks
    them from the public log."""
    server = Server(make_ctx, db_url, quorum=2)
    server.register(hub_ref(13))
    tick(server.ctx)
    clock.now = datetime.now(UTC)  # signatures are made at the real time
    app = create_app(server.ctx.settings, context=server.ctx, run_scheduler=False)
    keys = {who: SigningKey.generate() for who in ("r1", "r2")}
    with TestClient(app) as api:

        def call(who: str, path: str, body: dict[str, Any]) -> Any:
            return api.post(
                path, params={"runner": f"{who}-box"}, json=body, headers=auth(server.tokens[who])
            )

        def pull(who: str, version: str) -> Any:
            body = {"runner": f"{who}-box", "protocol_version": version}
            return api.post("/v0/leases", json=body, headers=auth(server.tokens[who]))

        for who, key in keys.items():
            public = {"public_key": bytes(key.verify_key).hex()}
            made = api.post(
                f"/v0/runners/{who}-box/keys", json=public, headers=auth(server.tokens[who])
            )
            assert made.status_code == 201, made.text
        old = pull("r3", "1.1")
        assert old.status_code == 201 and old.json()["task"]["benchmark"].get("kind") is None
        assert pull("r3", "1.1").status_code == 204  # the edge task is not offered to 1.1

        leases = {}
        scored = pull("r1", "1.2").json()
        assert scored["task"]["benchmark"].get("kind") is None
        body = payload(scored, 1.0) | {"protocol_version": "1.2", "next_pull_key": "k" * 16}
        body["signature"] = signature(keys["r1"], scored, body["result"], clock.now.isoformat())
        answer = call("r1", f"/v0/leases/{scored['lease_id']}/result", body)
        assert answer.status_code == 201, answer.text
        leases["r1"] = answer.json()["next"]  # the edge task, leased with the receipt
        leases["r2"] = pull("r2", "1.2").json()  # the scored task's slots are taken
        assert {lease["task"]["benchmark"]["kind"] for lease in leases.values()} == {"edge"}

        for n, (who, lease) in enumerate(leases.items()):
            rep = report(lease["task"]["id"], speed=20.0 + 10 * n)
            body = _signed_edge(keys[who], lease, rep)
            forged = body | {"signature": body["signature"] | {"value": "0" * 128}}
            refused = call(who, f"/v0/leases/{lease['lease_id']}/edge", forged)
            assert refused.status_code == 422, refused.text  # a bad signature stores nothing
            answer = call(who, f"/v0/leases/{lease['lease_id']}/edge", body)
            assert answer.status_code == 201, answer.text
            again = call(who, f"/v0/leases/{lease['lease_id']}/edge", body)
            assert again.status_code == 200 and again.json()["duplicate"]
        assert answer.json()["task_status"] == "DONE"

        shown = api.get("/v0/edge").json()
        assert shown["workload"]["prompt_tokens"] == 24
        (row,) = shown["rows"]
        assert row["runners"] == 2 and row["decode_tokens_per_s"]["low"] == 21.0
        page = api.get(f"/models/{leases['r1']['task']['model']['id']}")
        assert page.status_code == 200 and 'id="edge-by-class"' in page.text
    with EmbeddedServer(create_app(server.ctx.settings, context=server.ctx)) as live:
        checked = verify(live.url, tmp_path / "verify-state.json", Console())
    assert checked.problems == [] and checked.edge_signatures_checked == 2


def test_an_edge_task_nobody_ran_does_not_mark_its_model_disputed(server, clock):
    model = server.register(hub_ref(14))
    tick(server.ctx)
    clock.advance(EPOCH)
    tick(server.ctx)  # the first edge task, which nobody took, is closed DISPUTED
    assert server.edge_tasks()[0].status == TaskStatus.DISPUTED
    (owned,) = owned_models(server.ctx, authenticate_api_token(server.ctx, server.tokens["owner"]))
    assert owned.model.id == model
    assert (owned.status, owned.tasks_disputed) == ("pending", 0)
