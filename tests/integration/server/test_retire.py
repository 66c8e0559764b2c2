"""Retired models, the caller's models and account, on SQLite and PostgreSQL.

A retired model leaves the board (the API's and the pages') and the schedule, and its
open tasks are offered to no runner; its tasks, their pages and its log entries stay,
and ``quorumbench verify`` still passes. A real server (uvicorn in a thread) serves
the verifier, as in test_public_log.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from rich.console import Console

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.canonical import predictions_digest
from quorumbench.db.models import Model
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch

from ..signing import Keyring
from .conftest import fake_metadata, hub_ref
from .test_api import assert_problem
from .test_public_log import RUNNERS, finalize


class Served:
    def __init__(self, server: EmbeddedServer, tokens: dict[str, str]) -> None:
        self.server = server
        self.tokens = tokens
        self.http = httpx.Client(base_url=server.url, timeout=30)

    @property
    def ctx(self) -> Any:
        return self.server.context

    def call(self, method: str, path: str, who: str | None = "owner", **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return self.http.request(method, path, headers=headers, **kwargs)

    def board(self, **params: Any) -> list[int]:
        rows = self.call("GET", "/v0/leaderboard", None, params=params).json()["rows"]
        return [r["model_id"] for r in rows]


@pytest.fixture
def served(make_ctx, db_url):
    ctx = make_ctx(db_url, registrations_per_week=10, web_cache_s=0)
    ctx.inspector = fake_metadata
    create_account(ctx, "admin", is_admin=True)
    tokens = {"admin": issue_token(ctx, "admin", scopes=("admin",)).token}
    for name in ("owner", "other", *RUNNERS):
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name).token
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as running:
        world = Served(running, tokens)
        yield world
        world.http.close()


def test_a_retired_model_leaves_the_board_and_the_schedule_and_keeps_its_history(served, tmp_path):
    finalize(served.server, served.tokens, 1, score=0.5)
    finalize(served.server, served.tokens, 2, score=0.75)
    assert sorted(served.board(benchmark="arith")) == [1, 2]
    assert sorted(served.board()) == [1, 2]  # the aggregate
    retired = served.call("POST", "/v0/models/1/retire")
    assert retired.status_code == 200, retired.text
    assert retired.json()["retired_at"] is not None and retired.json()["active"] is False
    # off every board, and ranks close up
    assert served.board(benchmark="arith") == [2] and served.board() == [2]
    page = served.call("GET", "/v0/leaderboard", None, params={"benchmark": "arith"}).json()
    assert page["total"] == 1 and page["rows"][0]["rank"] == 1
    home = served.call("GET", "/", None).text
    assert hub_ref(2).split("/")[-1] in home and hub_ref(1).split("/")[-1] not in home
    # its history stays: the model, its task and the task's page, its log entry
    model = served.call("GET", "/v0/models/1", None).json()
    assert model["retired_at"] == retired.json()["retired_at"]
    tasks = served.call("GET", "/v0/tasks", None, params={"model_id": 1}).json()
    assert [t["status"] for t in tasks] == ["DONE"]
    assert served.call("GET", f"/v0/tasks/{tasks[0]['id']}", None).status_code == 200
    assert served.call("GET", f"/tasks/{tasks[0]['id']}", None).status_code == 200
    model_page = served.call("GET", "/models/1", None)
    assert model_page.status_code == 200 and 'id="retired"' in model_page.text
    entries = served.call("GET", "/v0/log/entries", None).json()
    assert sorted(e["entry"]["task"]["model"]["id"] for e in entries) == [1, 2]
    # the verifier: the log has model 1, the board does not, and the server says why
    report = verify(served.server.url, tmp_path / "state.json", Console())
    assert report.problems == [] and report.retired_models == {1}
    assert report.rows_compared == 1
    # the next epoch schedules model 2 only, and no runner is offered model 1
    ctx = served.ctx
    ctx.clock.advance(ctx.settings.epoch_seconds)
    epoch = ensure_epoch(ctx, ctx.now())
    schedule_epoch(ctx, epoch)
    fresh = served.call("GET", "/v0/tasks", None, params={"status": "PENDING"}).json()
    assert {t["model"]["id"] for t in fresh} == {2}
    lease = served.call("POST", "/v0/leases", "r1", json={"runner": "r1"})
    assert lease.status_code == 201 and lease.json()["task"]["model"]["id"] == 2


def test_the_open_tasks_of_a_retired_model_are_offered_to_no_runner(served):
    registered = served.call("POST", "/v0/models", json={"ref": hub_ref(1)})
    assert registered.status_code == 201
    assert served.call("GET", "/v0/tasks", None, params={"model_id": 1}).json()
    assert served.call("POST", "/v0/models/1/retire").status_code == 200
    for who in RUNNERS:
        assert served.call("POST", "/v0/leases", who, json={"runner": who}).status_code == 204
    ctx = served.ctx
    ctx.clock.advance(ctx.settings.epoch_seconds)
    assert schedule_epoch(ctx, ensure_epoch(ctx, ctx.now())) == 0


def test_only_the_owner_or_an_admin_retires_a_model_and_twice_is_once(served):
    for n in (1, 2):
        assert served.call("POST", "/v0/models", json={"ref": hub_ref(n)}).status_code == 201
    assert_problem(served.call("POST", "/v0/models/1/retire", "other"), 404, "not-found")
    assert_problem(served.call("POST", "/v0/models/99/retire"), 404, "not-found")
    assert_problem(served.call("POST", "/v0/models/1/retire", None), 401, "unauthenticated")
    pull_only = issue_token(served.ctx, "owner", scopes=("task:pull",)).token
    served.tokens["owner-pull"] = pull_only
    assert_problem(
        served.call("POST", "/v0/models/1/retire", "owner-pull"), 403, "forbidden", "model:register"
    )
    assert served.call("GET", "/v0/models/1", None).json()["retired_at"] is None
    first = served.call("POST", "/v0/models/1/retire").json()
    served.ctx.clock.advance(60)
    again = served.call("POST", "/v0/models/1/retire").json()
    assert again["retired_at"] == first["retired_at"]
    by_admin = served.call("POST", "/v0/models/2/retire", "admin")
    assert by_admin.status_code == 200 and by_admin.json()["retired_at"] is not None


def _dispute(served: Served, keyring: Keyring) -> None:
    """Three runner accounts disagree on the one open task (0, 1, 0: a spread of 1)."""
    for who, score in zip(RUNNERS, (0.0, 1.0, 0.0), strict=True):
        lease = served.call("POST", "/v0/leases", who, json={"runner": who}).json()
        task = lease["task"]
        n = task["n_samples"]
        result = {
            "task_id": task["id"],
            "score": score,
            "n": n,
            "sample_ids": task["sample_ids"],
            "sample_scores": [score] * n,
            "sample_output_hashes": ["0" * 64] * n,
            "outputs_sha256": "a" * 64,
            "sample_predictions": [int(score)] * n,
            "predictions_sha256": predictions_digest([int(score)] * n),
            "runtime_s": 1.0,
        }
        body = {
            "attempt": lease["attempt"],
            "result": result,
            "signature": keyring.sign(served.tokens[who], who, lease, result),
        }
        answer = served.call(
            "POST", f"/v0/leases/{lease['lease_id']}/result", who, params={"runner": who}, json=body
        )
        assert answer.status_code == 201, answer.text


def test_my_models_say_where_each_stands_and_my_account_shows_it_all(served):
    finalize(served.server, served.tokens, 1)  # ranked
    assert served.call("POST", "/v0/models", json={"ref": hub_ref(2)}).status_code == 201
    _dispute(served, Keyring(served.http.post, served.ctx.now))  # 2: disputed
    for n in (3, 4, 5):  # pending, then retired, then paused
        assert served.call("POST", "/v0/models", json={"ref": hub_ref(n)}).status_code == 201
    assert served.call("POST", "/v0/models/4/retire").status_code == 200
    with served.ctx.db.write() as session:
        session.get_one(Model, 5).paused_at = served.ctx.now()
    mine = served.call("GET", "/v0/me/models").json()
    assert [(m["model"]["id"], m["status"]) for m in mine] == [
        (5, "paused"),
        (4, "retired"),
        (3, "pending"),
        (2, "disputed"),
        (1, "ranked"),
    ]
    ranked, disputed = mine[4], mine[3]
    assert (ranked["tasks_done"], ranked["tasks_open"], ranked["aggregate_complete"]) == (
        1,
        0,
        True,
    )
    assert ranked["url"] == "/models/1"
    assert disputed["tasks_disputed"] == 1 and disputed["tasks_open"] == 1
    assert served.call("GET", "/v0/me/models", "other").json() == []
    account = served.call("GET", "/v0/me/account").json()
    assert account["name"] == "owner" and account["models"] == mine
    assert account["quota"]["registrations_last_7_days"] == 5
    assert account["runners"] == []
    assert [t["name"] for t in account["tokens"]] == ["default"]
    assert "token" not in account["tokens"][0]
    runner = served.call("GET", "/v0/me/account", "r1").json()
    assert runner["models"] == [] and [r["name"] for r in runner["runners"]] == ["r1"]
    box = runner["runners"][0]
    assert box["results"] == 2 and box["suspended"] is False and box["last_seen_at"]
    # two keyrings registered a key each: the newer one revoked the older (newest first)
    assert [k["revoked_at"] is None for k in box["keys"]] == [True, False]
    assert box["agreements"] + box["outliers"] >= 1
    assert runner["quota"]["accepted_evaluations"] == 1  # model 1's DONE task
    assert served.call("GET", "/v0/me/account", None).status_code == 401


def test_retiring_frees_no_weekly_slot(served):
    served.ctx.settings = served.ctx.settings.model_copy(update={"registrations_per_week": 1})
    assert served.call("POST", "/v0/models", json={"ref": hub_ref(1)}).status_code == 201
    assert served.call("POST", "/v0/models/1/retire").status_code == 200
    refused = served.call("POST", "/v0/models", json={"ref": hub_ref(2)})
    assert_problem(refused, 429, "rate-limited", "1 per week")
    assert int(refused.headers["Retry-After"]) == int(timedelta(days=7).total_seconds())
