"""Owners see why their models' tasks fail, and a model whose tasks keep failing is
paused until its owner resumes it (services/failures.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from quorumbench.api.app import create_app
from quorumbench.db.models import Lease
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.context import ServerContext
from quorumbench.services.failures import report_failure
from quorumbench.services.runners import runner_for
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch
from quorumbench.services.sessions import authenticate

from ..signing import Keyring
from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem, auth, payload

RUNNERS = ("qx-ann", "qx-ben", "qx-cat", "qx-dan", "qx-eve", "qx-fay")
"""Runner accounts; their names must never appear where failures are shown."""


@dataclass
class World:
    ctx: ServerContext
    client: TestClient
    tokens: dict[str, str]
    keyring: Keyring = field(init=False)

    def __post_init__(self) -> None:
        self.keyring = Keyring(self.client.post, self.ctx.now)

    def register(self, n: int = 1, who: str = "owner") -> int:
        answer = self.client.post(
            "/v0/models", json={"ref": hub_ref(n)}, headers=auth(self.tokens[who])
        )
        assert answer.status_code == 201, answer.text
        return int(answer.json()["id"])

    def next_epoch(self) -> None:
        self.ctx.clock.advance(self.ctx.settings.epoch_seconds)  # type: ignore[attr-defined]
        schedule_epoch(self.ctx, ensure_epoch(self.ctx, self.ctx.now()))

    def pull(self, who: str) -> dict[str, Any] | None:
        answer = self.client.post(
            "/v0/leases", json={"runner": f"{who}-box"}, headers=auth(self.tokens[who])
        )
        assert answer.status_code in (201, 204), answer.text
        return answer.json() if answer.status_code == 201 else None

    def fail(self, who: str, reason: str = "the endpoint never answered") -> dict[str, Any]:
        lease = self.pull(who)
        assert lease is not None, f"{who} got nothing to do"
        answer = self.client.post(
            f"/v0/leases/{lease['lease_id']}/failure",
            params={"runner": f"{who}-box"},
            json={"attempt": lease["attempt"], "reason": reason},
            headers=auth(self.tokens[who]),
        )
        assert answer.status_code == 204, answer.text
        return lease

    def submit(self, who: str, score: float = 0.5) -> dict[str, Any]:
        lease = self.pull(who)
        assert lease is not None, f"{who} got nothing to do"
        body = payload(lease, score)
        body["signature"] = self.keyring.sign(self.tokens[who], f"{who}-box", lease, body["result"])
        answer = self.client.post(
            f"/v0/leases/{lease['lease_id']}/result",
            params={"runner": f"{who}-box"},
            json=body,
            headers=auth(self.tokens[who]),
        )
        assert answer.status_code == 201, answer.text
        return lease

    def model(self, model_id: int) -> dict[str, Any]:
        return dict(self.client.get(f"/v0/models/{model_id}").json())

    def failures(self, model_id: int, who: str | None = "owner", **params: Any) -> Any:
        headers = auth(self.tokens[who]) if who else {}
        return self.client.get(f"/v0/models/{model_id}/failures", params=params, headers=headers)


@pytest.fixture
def make_world(make_ctx, db_url):
    made: list[TestClient] = []

    def make(**overrides: Any) -> World:
        ctx = make_ctx(db_url, **overrides)
        ctx.inspector = fake_metadata
        create_account(ctx, "admin", is_admin=True)
        tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
        for name in ("owner", "other", *RUNNERS):
            create_account(ctx, name)
            tokens[name] = issue_token(ctx, name).token
        client = TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False))
        made.append(client)
        return World(ctx, client.__enter__(), tokens)

    yield make
    for client in made:
        client.__exit__(None, None, None)


def _failed_task(world: World, *who: str, reason: str = "the endpoint never answered") -> int:
    """Each of ``who`` pulls and reports a failure; the task they all failed."""
    tasks = {world.fail(name, reason)["task"]["id"] for name in who}
    assert len(tasks) == 1, tasks
    return tasks.pop()


# --- failure reasons: pages and the owner's API --------------------------------------


def test_failure_reasons_are_shown_with_task_and_time_but_never_who(make_world):
    world = make_world()
    model_id = world.register()
    hostile = "<script>alert('x')</script> model failed to load: " + "y" * 450
    task_id = _failed_task(world, "qx-ann", reason=hostile)
    _failed_task(world, "qx-ben", reason="connection refused by http://llm:8000")
    assert world.model(model_id)["paused_at"] is None  # one failed task is not a streak

    page = world.client.get(f"/models/{model_id}").text
    assert 'id="failures"' in page and 'id="paused"' not in page
    assert "connection refused by http://llm:8000" in page
    assert "&lt;script&gt;alert(" in page and "<script>alert(" not in page  # escaped
    assert "y" * 240 + "…" in page and "y" * 260 not in page  # shortened on the page
    assert f'href="/tasks/{task_id}"' in page
    assert "qx-" not in page  # no runner, no account

    task_page = world.client.get(f"/tasks/{task_id}").text
    assert 'id="open-task"' in task_page and 'id="failures"' in task_page
    assert "connection refused" in task_page and "&lt;script&gt;" in task_page
    for hidden in ('id="results"', 'id="samples"', "qx-"):
        assert hidden not in task_page

    as_json = world.client.get(f"/models/{model_id}?format=json").json()
    assert as_json["paused_at"] is None
    newest, oldest = as_json["failures"]
    assert set(newest) == {"task_id", "epoch", "benchmark", "reason", "reported_at"}
    assert newest["reason"].startswith("connection refused") and newest["benchmark"] == "arith"
    assert oldest["reason"].startswith("<script>") and len(oldest["reason"]) == 300
    task_json = world.client.get(f"/tasks/{task_id}?format=json").json()
    assert task_json["results"] == [] and task_json["n_results"] is None
    assert [f["reason"][:10] for f in task_json["failures"]] == ["connection", "<script>al"]
    assert "qx-" not in str(as_json) + str(task_json)

    # the owner's API has the whole text
    reports = world.failures(model_id).json()
    assert [len(f["reason"]) for f in reports["failures"]] == [37, len(hostile)]
    assert "qx-" not in str(reports)


def test_only_the_owner_or_an_admin_reads_the_failure_reports(make_world):
    world = make_world()
    model_id = world.register()
    first = _failed_task(world, "qx-ann", "qx-ben", reason="first")
    world.next_epoch()
    second = _failed_task(world, "qx-ann", reason="second")

    mine = world.failures(model_id)
    assert mine.status_code == 200, mine.text
    body = mine.json()
    assert body["model_id"] == model_id and body["paused_at"] is None
    assert [(f["task_id"], f["reason"]) for f in body["failures"]] == [
        (second, "second"),
        (first, "first"),
        (first, "first"),
    ]
    assert {f["benchmark"] for f in body["failures"]} == {"arith"}
    assert body["failures"][0]["epoch"] == body["failures"][1]["epoch"] + 1
    assert body["next_before"] is None
    page = world.failures(model_id, limit=2).json()
    assert [f["reason"] for f in page["failures"]] == ["second", "first"]
    rest = world.failures(model_id, limit=2, before=page["next_before"]).json()
    assert [f["reason"] for f in rest["failures"]] == ["first"] and rest["next_before"] is None

    assert world.failures(model_id, who="admin").json()["failures"] == body["failures"]
    pull_only = issue_token(world.ctx, "owner", scopes=("task:pull",), name="pull").token
    world.tokens["owner-pull"] = pull_only
    assert world.failures(model_id, who="owner-pull").status_code == 200  # a read, any scope
    assert_problem(world.failures(model_id, who="other"), 403, "forbidden", "only its owner")
    assert_problem(world.failures(model_id, who="qx-ann"), 403, "forbidden", "only its owner")
    assert_problem(world.failures(model_id, who=None), 401, "unauthenticated")
    assert_problem(world.failures(99999), 404, "not-found", "no model 99999")


# --- pausing ----------------------------------------------------------------------


def test_consecutive_failed_tasks_pause_the_model_until_its_owner_resumes_it(make_world, caplog):
    caplog.set_level(logging.INFO, logger="quorumbench.models")
    world = make_world()
    model_id = world.register()
    for epoch in range(3):
        if epoch:
            world.next_epoch()
        for who in ("qx-ann", "qx-ben"):
            assert world.model(model_id)["paused_at"] is None
            world.fail(who, reason=f"checkpoint does not load (epoch {epoch})")
    model = world.model(model_id)
    assert model["paused_at"] is not None
    assert model["paused_reason"].startswith("3 consecutive tasks failed (tasks ")
    assert model["paused_reason"].endswith("last reason: checkpoint does not load (epoch 2)")
    paused = [r.qb_fields for r in caplog.records if r.getMessage() == "model.paused"]
    assert [(p["model"], p["failed_tasks"]) for p in paused] == [(model_id, [1, 2, 3])]

    # its three open tasks are offered to nobody; another model's are
    assert world.pull("qx-cat") is None
    other_model = world.register(2, who="other")
    lease = world.pull("qx-cat")
    assert lease is not None and lease["task"]["model"]["id"] == other_model
    assert world.pull("qx-cat") is None
    page = world.client.get(f"/models/{model_id}").text
    assert 'id="paused"' in page and f"POST /v0/models/{model_id}/resume" in page
    assert "3 consecutive tasks failed" in page and "qx-" not in page
    assert world.client.get(f"/models/{model_id}?format=json").json()["paused_at"]
    assert world.failures(model_id).json()["paused_reason"] == model["paused_reason"]

    # someone else cannot resume it; its owner can
    resume = f"/v0/models/{model_id}/resume"
    refused = world.client.post(resume, headers=auth(world.tokens["other"]))
    assert_problem(refused, 403, "forbidden", "only its owner")
    assert world.model(model_id)["paused_at"] is not None
    assert_problem(world.client.post(resume), 401, "unauthenticated")
    pull_only = issue_token(world.ctx, "owner", scopes=("task:pull",), name="pull").token
    assert_problem(
        world.client.post(resume, headers=auth(pull_only)), 403, "forbidden", "model:register"
    )
    resumed = world.client.post(resume, headers=auth(world.tokens["owner"]))
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["paused_at"] is None and resumed.json()["paused_reason"] is None
    assert 'id="paused"' not in world.client.get(f"/models/{model_id}").text
    lease = world.pull("qx-cat")
    assert lease is not None and lease["task"]["model"]["id"] == model_id

    # failures from before the resume no longer count: one more failed task is no streak
    world.client.post(
        f"/v0/leases/{lease['lease_id']}/failure",
        params={"runner": "qx-cat-box"},
        json={"attempt": lease["attempt"], "reason": "still broken"},
        headers=auth(world.tokens["qx-cat"]),
    )
    assert world.fail("qx-dan")["task"]["id"] == lease["task"]["id"]
    assert world.model(model_id)["paused_at"] is None
    again = world.client.post(resume, headers=auth(world.tokens["admin"]))
    assert again.status_code == 200 and again.json()["paused_at"] is None  # not paused: as is


def test_one_flaky_account_never_pauses_a_model(make_world):
    world = make_world()
    model_id = world.register()
    for epoch in range(4):
        if epoch:
            world.next_epoch()
        world.fail("qx-ann", reason="my GPU is busy")  # each time the newest task
    assert world.model(model_id)["paused_at"] is None
    assert len(world.failures(model_id).json()["failures"]) == 4
    world.fail("qx-ben")  # a second account fails the oldest task: one failed task
    assert world.model(model_id)["paused_at"] is None


def test_a_task_with_a_result_ends_the_streak(make_world):
    world = make_world()
    model_id = world.register()
    _failed_task(world, "qx-ann", "qx-ben", "qx-cat")
    world.next_epoch()
    _failed_task(world, "qx-ann", "qx-ben", "qx-cat")
    world.next_epoch()
    # qx-cat may take only the new task: it has a result, though two accounts failed it
    succeeded = world.submit("qx-cat")["task"]["id"]
    assert _failed_task(world, "qx-ann", "qx-ben") == succeeded
    for _ in range(2):
        world.next_epoch()
        _failed_task(world, "qx-ann", "qx-ben")
        assert world.model(model_id)["paused_at"] is None  # two failed since the result
    world.next_epoch()
    _failed_task(world, "qx-ann", "qx-ben")
    assert world.model(model_id)["paused_at"] is not None


def test_pausing_can_be_turned_off(make_world):
    world = make_world(pause_after_failed_tasks=0)
    model_id = world.register()
    for epoch in range(3):
        if epoch:
            world.next_epoch()
        _failed_task(world, "qx-ann", "qx-ben")
    assert world.model(model_id)["paused_at"] is None


def test_simultaneous_failure_reports_pause_the_model_once(make_world, caplog):
    world = make_world(pause_after_failed_tasks=2)
    ctx = world.ctx
    model_id = world.register()
    _failed_task(world, "qx-ann", "qx-ben", "qx-cat")
    world.next_epoch()
    claims = []
    for name in RUNNERS[:3]:  # barred from the failed task: each leases the new one
        principal = authenticate(ctx, world.tokens[name])
        claimant = runner_for(ctx, principal, f"{name}-box")
        claim = ctx.queue.claim(claimant, ctx.now())
        if claim is not None:
            claims.append((claimant, claim))
    assert len(claims) == 3  # quorum 3: three slots of the newest task
    assert len({claim.task_id for _, claim in claims}) == 1
    barrier = threading.Barrier(len(claims))
    errors: list[BaseException] = []

    def report(claimant: Any, claim: Any) -> None:
        try:
            barrier.wait(timeout=10)
            report_failure(ctx, claimant, claim.lease_id, claim.attempt, "out of memory")
        except BaseException as exc:  # pragma: no cover - shown below
            errors.append(exc)

    caplog.set_level(logging.INFO, logger="quorumbench.models")
    threads = [threading.Thread(target=report, args=pair) for pair in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    model = world.model(model_id)
    assert model["paused_at"] is not None and "last reason: out of memory" in model["paused_reason"]
    pauses = [r for r in caplog.records if r.getMessage() == "model.paused"]
    assert len(pauses) == 1, [r.qb_fields for r in pauses]
    with ctx.db.read() as session:
        states = session.scalars(select(Lease.state).where(Lease.task_id == claims[0][1].task_id))
        assert sorted(states) == ["FAILED"] * 3
