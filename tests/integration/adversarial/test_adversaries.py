"""Adversarial runners against a real server: each ends as designed.

Real server (uvicorn in a thread, SQLite), real runner client (``ServerClient``:
pulls, signed submissions); the evaluation itself is replaced by what each kind of
runner would send. Honest runners agree on a per-sample answer that depends on the
task's samples. Then:

* a lazy runner (scores without evaluating) is outvoted, recorded as an outlier and
  suspended; in every DONE task, exactly the counted results wrong on two or more
  samples are outliers (the per-sample rule, not only the score spread);
* a copying runner finds nothing to copy while a task is open (results are public
  only once it is final), its copies of finished tasks' numbers do not move any
  score, and a replay of another runner's signed submission is refused outright;
* a Sybil (three runners of one account) never holds two slots of one task, so it
  cannot make a quorum on its own;
* the owner is never offered its own model;
* a runner that fails canaries (tasks already settled by honest runners, handed to
  it as ordinary open tasks) loses reputation and is suspended;
and no wrong score reaches the leaderboard; ``quorumbench verify`` passes.
"""

from __future__ import annotations

import hashlib
import random
import zlib
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from rich.console import Console
from sqlalchemy import func, select

from quorumbench import protocol
from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.canonical import predictions_digest
from quorumbench.db.models import Result, Runner, Task
from quorumbench.errors import PermissionDeniedError
from quorumbench.runner.client import Lease, ServerClient
from quorumbench.runner.keys import create_key
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.settings import ServerSettings

from ..server.conftest import fake_metadata, hub_ref
from ..templates import migrated_sqlite

MODELS = 10


def honest_scores(model_id: int, n_samples: int) -> list[float]:
    """What evaluating a task of this model really gives: a pattern that depends on the
    model and the samples, half of them right (so every honest score is 0.5)."""
    flip = zlib.crc32(str(model_id).encode()) % 2
    return [float((i + flip) % 2) for i in range(n_samples)]


def payload(lease: Lease, scores: list[float]) -> protocol.ResultPayload:
    task = lease.task
    hashes = [
        hashlib.sha256(f"{s}:{x}".encode()).hexdigest()
        for s, x in zip(task.sample_ids, scores, strict=True)
    ]
    return protocol.ResultPayload(
        task_id=task.id,
        score=sum(scores) / len(scores),
        n=task.n_samples,
        sample_ids=task.sample_ids,
        sample_scores=scores,
        sample_output_hashes=hashes,
        outputs_sha256=hashlib.sha256("".join(hashes).encode()).hexdigest(),
        sample_predictions=[str(x) for x in scores],
        predictions_sha256=predictions_digest(str(x) for x in scores),
        runtime_s=0.0,
    )


@pytest.fixture
def world(tmp_path, request):
    overrides = getattr(request, "param", {})
    settings = ServerSettings(
        data_dir=tmp_path,
        database_url=migrated_sqlite(tmp_path / "adv.db"),
        benchmarks=["arith"],
        quorum=3,
        samples_per_task=6,
        agreement_threshold=0.2,
        outlier_limit=2,
        lease_seconds=60,
        registrations_per_week=100,
        quota_evaluations=0,
        # one epoch for the whole test: the servers run on the real clock, and an hour
        # boundary in the middle of a test would begin an epoch with tasks of its own
        epoch_seconds=10**9,
        **{"canary_rate": 0.0, **overrides},
    )
    with EmbeddedServer(create_app(settings, run_scheduler=False)) as server:
        ctx = server.context
        ctx.inspector = fake_metadata
        create_account(ctx, "owner", is_admin=True)
        owner_token = issue_token(ctx, "owner", scopes=("admin", "task:pull", "task:submit")).token
        with httpx.Client(base_url=server.url, timeout=30) as api:
            for i in range(MODELS):
                answer = api.post(
                    "/v0/models",
                    json={"ref": hub_ref(100 + i)},
                    headers={"Authorization": f"Bearer {owner_token}"},
                )
                assert answer.status_code == 201, answer.text
        clients: list[ServerClient] = []
        accounts: set[str] = {"owner"}

        def runner(account: str, name: str, token: str | None = None) -> ServerClient:
            """A runner of ``account`` (made on first use) with a registered key."""
            if token is None:
                if account not in accounts:
                    create_account(ctx, account)
                    accounts.add(account)
                token = issue_token(ctx, account, scopes=("task:pull", "task:submit")).token
            client = ServerClient(
                server.url,
                SecretStr(token),
                name,
                max_attempts=2,
                key=create_key(tmp_path / "keys" / f"{account}-{name}.key"),
            )
            assert client.key is not None
            client.register_key(client.key)
            clients.append(client)
            return client

        yield server, ctx, runner, owner_token
        for client in clients:
            client.close()


def drain(runners: dict[str, tuple[ServerClient, Any]], rounds: int = 40) -> dict[str, int]:
    """Let every runner pull and submit until nobody gets work; refusals per runner."""
    refused: dict[str, int] = {name: 0 for name in runners}
    for _ in range(rounds):
        worked = False
        for name, (client, answer) in runners.items():
            try:
                lease = client.pull()
            except PermissionDeniedError:
                refused[name] += 1  # suspended: may not pull any more
                continue
            if lease is None:
                continue
            worked = True
            client.submit(lease, payload(lease, answer(lease)))
        if not worked:
            break
    return refused


def test_lazy_copying_sybil_and_owner_runners_end_as_designed(world, tmp_path):
    server, ctx, runner, owner_token = world
    rng = random.Random(7)

    def honest(lease: Lease) -> list[float]:
        return honest_scores(lease.task.model.id, len(lease.task.sample_ids))

    def lazy(lease: Lease) -> list[float]:
        # claims a perfect (or random high) score without evaluating anything
        return [float(rng.random() < 0.95) for _ in lease.task.sample_ids]

    def copier(lease: Lease) -> list[float]:
        # nothing of an open task is public: no results to copy before it is final
        task = httpx.get(f"{server.url}/v0/tasks/{lease.task.id}").json()
        assert task["results"] == [] and not task["final"]
        finished = httpx.get(f"{server.url}/v0/tasks", params={"status": "DONE"}).json()
        if finished:  # so it copies another model's finished numbers
            return list(finished[-1]["results"][0]["sample_scores"])
        return [1.0] * len(lease.task.sample_ids)

    # adversaries pull first, so they take part in every task they can
    runners = {
        "lazy": (runner("lazy", "box"), lazy),
        "copier": (runner("copier", "box"), copier),
        "sybil1": (runner("sybil", "a"), honest),
        "sybil2": (runner("sybil", "b"), honest),
        "sybil3": (runner("sybil", "c"), honest),
        "owner": (runner("owner", "box", owner_token), honest),
        "h1": (runner("honest1", "box"), honest),
        "h2": (runner("honest2", "box"), honest),
        "h3": (runner("honest3", "box"), honest),
        "h4": (runner("honest4", "box"), honest),
    }
    refused = drain(runners)

    with ctx.db.read() as session:
        tasks = session.scalars(select(Task)).all()
        assert tasks and all(t.finalized_at is not None for t in tasks)
        for task in tasks:
            # no wrong score reached a DONE task (and so the leaderboard)
            if task.status == "DONE":
                assert task.score == pytest.approx(0.5)
            # a Sybil's runners share one slot per task
            sybil = session.scalar(
                select(func.count())
                .select_from(Result)
                .join(Runner, Runner.id == Result.runner_id)
                .where(Result.task_id == task.id, Runner.name.in_(("a", "b", "c")))
            )
            assert sybil <= 1
        assert any(t.status == "DONE" for t in tasks)
        # sample by sample: no counted result wrong on two or more of a DONE task's six
        # samples agreed (tolerance 0.2: one may differ), whatever its score
        for task in tasks:
            truth = honest_scores(task.model_id, len(task.sample_ids))
            for result in session.scalars(select(Result).where(Result.task_id == task.id)):
                wrong = sum(1 for x, y in zip(result.sample_scores, truth, strict=True) if x != y)
                if task.status == "DONE" and result.counted:
                    assert result.outlier == (wrong >= 2), (task.id, result.id, wrong)
    # the owner was never offered its own models
    assert runners["owner"][0].pull() is None
    board = httpx.get(f"{server.url}/v0/leaderboard", params={"benchmark": "arith"}).json()
    for row in board["rows"]:
        assert 0 <= row["score"] <= 1
    # the lazy and the copying runner were outvoted until suspended; honest ones not
    with ctx.db.read() as session:
        state = {
            (r.account_id, r.name): (r.outliers, r.agreements, r.suspended)
            for r in session.scalars(select(Runner))
        }
    suspended = {key for key, (_, _, s) in state.items() if s}
    assert refused["lazy"] >= 1, (refused, state)
    assert len(suspended) == 1, state  # the lazy runner only
    assert all(refused[h] == 0 for h in ("h1", "h2", "h3", "h4", "copier")), refused
    # and the log of all this verifies
    report = verify(server.url, tmp_path / "verify.json", Console())
    assert report.problems == [] and report.size == sum(1 for _ in tasks)


def test_a_replayed_submission_of_another_runner_is_refused(world):
    server, ctx, runner, _ = world
    victim = runner("victim", "box")
    thief = runner("thief", "box")
    mine = victim.pull()
    theirs = thief.pull()
    assert mine is not None and theirs is not None
    # the thief resends the victim's signed body under its own lease
    body = payload(mine, honest_scores(mine.task.model.id, len(mine.task.sample_ids)))
    signature = victim.key.sign_result(mine.task, mine.lease_id, mine.attempt, body)
    stolen = {
        "attempt": theirs.attempt,
        "result": body.model_dump(mode="json"),
        "signature": signature.model_dump(),
    }
    answer = httpx.post(
        f"{server.url}/v0/leases/{theirs.lease_id}/result",
        params={"runner": "box"},
        json=stolen,
        headers={"Authorization": thief._http.headers["Authorization"]},
    )
    assert answer.status_code == 422
    assert answer.json()["type"] == "/problems/invalid-signature"


@pytest.mark.parametrize("world", [{"canary_rate": 1.0, "canary_window_s": 600}], indirect=True)
def test_a_runner_failing_canaries_is_suspended_and_changes_no_score(world, tmp_path):
    server, ctx, runner, _ = world

    def honest(lease: Lease) -> list[float]:
        return honest_scores(lease.task.model.id, len(lease.task.sample_ids))

    def cheat(lease: Lease) -> list[float]:
        return [1.0] * len(lease.task.sample_ids)  # a perfect score, evaluated nothing

    # Both outsiders are about (their runners registered keys) before the work starts.
    cheater = {"cheater": (runner("cheater", "box"), cheat)}
    late = {"late": (runner("late", "box"), honest)}
    drain({name: (runner(f"honest{name}", "box"), honest) for name in ("1", "2", "3")})
    with ctx.db.read() as session:
        tasks = session.scalars(select(Task)).all()
        # every task reached consensus and now waits, still open, for one more runner
        assert len(tasks) == MODELS and all(t.finalized_at is None for t in tasks)
        assert all(t.canary is not None and t.open_slots == 1 for t in tasks)
    refused = drain(cheater)
    assert refused["cheater"] >= 1  # suspended after outlier_limit (2) failed canaries
    drain(late)  # an honest runner takes the remaining canaries and passes them
    with ctx.db.read() as session:
        tasks = session.scalars(select(Task)).all()
        assert all(t.status == "DONE" and t.score == pytest.approx(0.5) for t in tasks)
        checks = [c for t in tasks for c in t.canary["checks"]]
        state = {r.name: r for r in session.scalars(select(Runner))}
        cheater_row = session.scalars(
            select(Runner).join(Result, Result.runner_id == Runner.id).where(Result.score == 1.0)
        ).first()
    assert [c["passed"] for c in checks].count(False) == 2
    assert [c["passed"] for c in checks].count(True) == MODELS - 2
    assert cheater_row is not None and cheater_row.suspended and cheater_row.outliers == 2
    assert not any(r.suspended for r in state.values() if r.id != cheater_row.id)
    board = httpx.get(f"{server.url}/v0/leaderboard", params={"benchmark": "arith"}).json()
    assert all(row["score"] == pytest.approx(0.5) for row in board["rows"])
    report = verify(server.url, tmp_path / "verify.json", Console())
    assert report.problems == [] and report.size == MODELS
