"""Deepening a plan's thin slice on a real server: tasks on exactly the plan's labelled
samples, through the runners' queue and consensus, into the log but never the board.

The server runs one custom benchmark (``sums``, 20 samples, 4 per task) whose even
samples are labelled ``science/math`` and odd ones ``science/physics``; the plans ask
for physics.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy import func, select

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.core.plans import parse_plan
from quorumbench.core.publiclog import leaderboard_from_log
from quorumbench.db.models import TASK_DEEPEN, TASK_EPOCH, Account, Model, Task
from quorumbench.errors import NotFoundError, RateLimitedError
from quorumbench.services import ask_cache, deepen
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.services.scheduler import gaps, tick
from quorumbench.services.subjects import by_subject

from ..sums import write_sums_spec
from .conftest import fake_metadata, hub_ref
from .test_api import pull, register, submit

PHYSICS = {f"s{i}" for i in range(1, 20, 2)}
RUNNERS = ("r1", "r2", "r3", "r4", "r5")
DEEPEN_UNCHECKED = "deepen task: samples chosen by a plan's labels, not by the epoch seed"


@pytest.fixture
def labelled_spec(tmp_path):
    return write_sums_spec(
        tmp_path,
        "{subj}",
        lambda i: {"subj": "science/math" if i % 2 == 0 else "science/physics"},
    )


def _world(make_ctx, spec, url=None, **overrides):
    ctx = make_ctx(url, benchmarks=[spec], samples_per_task=4, **overrides)
    ctx.inspector = fake_metadata
    people = {}
    for name in ("owner", "asker", "other", *RUNNERS):
        create_account(ctx, name)
        people[name] = issue_token(ctx, name).token
    return ctx, people


def _account(ctx, name):
    with ctx.db.read() as session:
        return session.scalars(select(Account.id).where(Account.name == name)).one()


def _plan(budget=6, **extra):
    return parse_plan({"labels": {"subject": ["science/physics"]}, "budget": budget, **extra})


def _tasks(ctx, purpose):
    with ctx.db.read() as session:
        return list(session.scalars(select(Task).where(Task.purpose == purpose).order_by(Task.id)))


def _run_all(api, people, score=1.0):
    """Runners lease and answer every open task until the queue is empty; the answers."""
    answers = []
    while True:
        leases = {}
        for who in RUNNERS:
            got = pull(api, people, who)
            if got.status_code == 201:
                leases[who] = got.json()
        if not leases:
            return answers
        for who, lease in leases.items():
            answer = submit(api, people, who, lease, score)
            assert answer.status_code == 201, answer.text
            answers.append(answer.json())


def _board_rows(api):
    return api.get("/v0/leaderboard", params={"benchmark": "sums"}).json()["rows"]


def test_deepen_schedules_the_plan_samples_and_runners_verify_them_off_the_board(
    make_ctx, labelled_spec, db_url, tmp_path
):
    ctx, people = _world(make_ctx, labelled_spec, db_url)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        assert register(api, people, hub_ref(1)).status_code == 201
        _run_all(api, people)
        (epoch_task,) = _tasks(ctx, TASK_EPOCH)
        assert epoch_task.status == "DONE"
        board = _board_rows(api)
        aggregate = api.get("/v0/leaderboard").json()["rows"]
        assert board[0]["n_samples"] == 4 and board[0]["n_tasks"] == 1
        verified = set(epoch_task.sample_ids) & PHYSICS

        plan = _plan(budget=7)
        asked = deepen.request(ctx, plan, _account(ctx, "asker"))
        (entry,) = asked["scheduled"]
        assert asked["plan_id"] == plan.id and asked["skipped"] == []
        assert entry["have"] == len(verified) and entry["in_flight"] == 0
        missing = 7 - len(verified)
        made = _tasks(ctx, TASK_DEEPEN)
        ids = [i for t in made for i in t.sample_ids]
        # exactly the plan's labelled samples, none verified before, none twice
        assert len(ids) == len(set(ids)) == missing == asked["samples"] == entry["samples"]
        assert set(ids) <= PHYSICS and not set(ids) & verified
        assert [t.n_samples for t in made] == [4] * (missing // 4) + [missing % 4] * (
            missing % 4 > 0
        )
        assert {t.plan_id for t in made} == {plan.id} and [t.part for t in made] == list(
            range(len(made))
        )
        assert entry["benchmarks"][0]["tasks"] == [t.id for t in made]
        assert all(t.priority > epoch_task.priority for t in made)
        # idempotent: the same request while they are open schedules nothing
        again = deepen.request(ctx, plan, _account(ctx, "asker"))
        assert again["tasks"] == 0 and again["scheduled"] == []
        assert "being evaluated" in again["skipped"][0]["reason"]
        assert len(_tasks(ctx, TASK_DEEPEN)) == len(made)
        before = deepen.progress(ctx, plan.id)
        assert before["pending"] == len(made) and before["finished"] is False
        assert before["models"][0]["samples"] == missing

        # Runners lease them like any task and reach consensus.
        leased = pull(api, people, "r1").json()
        assert leased["task"]["id"] == made[0].id
        assert leased["task"]["sample_ids"] == made[0].sample_ids
        assert deepen.progress(ctx, plan.id)["leased"] == 1
        submit(api, people, "r1", leased, 1.0)
        _run_all(api, people)
        after = deepen.progress(ctx, plan.id)
        assert after["done"] == after["tasks"] == len(made) and after["finished"] is True
        assert after["samples_done"] == missing

        # Verified (the log has them, marked) but the board is as it was.
        assert _board_rows(api) == board
        assert api.get("/v0/leaderboard").json()["rows"] == aggregate
        rows = api.get("/v0/log/entries", params={"start": 0}).json()
        marked = [r["entry"]["task"] for r in rows if "purpose" in r["entry"]["task"]]
        assert [t["id"] for t in marked] == [t.id for t in made]
        assert {(t["purpose"], t["plan"]) for t in marked} == {(TASK_DEEPEN, plan.id)}
        recomputed = leaderboard_from_log(rows)
        assert list(recomputed) == [(epoch_task.model_id, "sums")]
        assert recomputed[(epoch_task.model_id, "sums")][0].n_samples == 4
        assert recomputed[(epoch_task.model_id, "sums")][0].n_tasks == 1

        # nor in the model page's subject table (the epoch task's four samples only)
        with ctx.db.read() as session:
            table = by_subject(ctx, session, epoch_task.model_id)
        assert sum(row.n_samples for row in table.get("sums", [])) in (0, 4)
        physics = [row.n_samples for row in table.get("sums", []) if "physics" in row.subject]
        assert physics in ([], [len(verified)])

        # The plan's cached answer has them all: the epoch task's and the deepened ones.
        with ctx.db.read() as session:
            (row,) = ask_cache.answer(ctx, session, plan).rows
        assert row.n_samples == 7 and not row.thin

        # Now thick enough: nothing more to do.
        done = deepen.request(ctx, plan, _account(ctx, "asker"))
        assert done["tasks"] == 0 and "7 verified samples" in done["skipped"][0]["reason"]

    # `quorumbench verify` from outside: the log recomputes the board without them, and
    # their samples are not checked against the epoch's seed (a plan chose them)
    with EmbeddedServer(create_app(ctx.settings, context=ctx, run_scheduler=False)) as server:
        report = verify(server.url, tmp_path / "verify-state.json", Console())
    assert report.problems == [] and report.rows_compared == 1
    assert report.samples_unchecked[DEEPEN_UNCHECKED] == len(made)


def test_epoch_scheduling_is_unaffected(make_ctx, labelled_spec, clock):
    # two epoch tasks per epoch: deepen tasks in it must not use that budget up
    ctx, people = _world(make_ctx, labelled_spec, epoch_task_budget=2)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        assert register(api, people, hub_ref(1)).status_code == 201
        (first,) = _tasks(ctx, TASK_EPOCH)
        open_physics = set(first.sample_ids) & PHYSICS  # open: not asked again
        deepen.request(ctx, _plan(budget=12), _account(ctx, "asker"))
        made = _tasks(ctx, TASK_DEEPEN)
        assert len(made) == -(-(10 - len(open_physics)) // 4)
        assert {t.epoch_id for t in made} == {first.epoch_id}
        assert not {i for t in made for i in t.sample_ids} & open_physics
        assert gaps(ctx, first.epoch_id) is None  # its one pair has its task
        # a model registered now still gets its task of this epoch
        assert register(api, people, hub_ref(2)).status_code == 201
        assert len(_tasks(ctx, TASK_EPOCH)) == 2
        clock.advance(ctx.settings.epoch_seconds)
        report = tick(ctx)
        assert report.epoch == first.epoch_id + 1 and report.created == 2
        assert len(_tasks(ctx, TASK_DEEPEN)) == len(made)
        # epoch tasks go first, whatever their age
        leased = pull(api, people, "r1").json()["task"]
        assert leased["id"] == first.id


def test_a_disputed_deepen_task_is_requeued_and_stays_off_the_board(make_ctx, labelled_spec):
    ctx, people = _world(make_ctx, labelled_spec, deepen_max_tasks=2)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        register(api, people, hub_ref(1))
        _run_all(api, people)
        board = _board_rows(api)
        plan = _plan(budget=10)  # 6 to 10 samples to ask: two tasks (the cap)
        assert deepen.request(ctx, plan, _account(ctx, "asker"))["tasks"] == 2
        leases = {who: pull(api, people, who).json() for who in ("r1", "r2", "r3")}
        assert len({lease["task"]["id"] for lease in leases.values()}) == 1
        for who, score in (("r1", 0.0), ("r2", 0.0), ("r3", 1.0)):
            last = submit(api, people, who, leases[who], score).json()
        assert last["task_status"] == "DISPUTED"
        state = deepen.progress(ctx, plan.id)
        assert (state["disputed"], state["pending"], state["finished"]) == (1, 1, False)
        _run_all(api, people, score=0.0)
        state = deepen.progress(ctx, plan.id)
        assert state["done"] == state["tasks"] == 2 and state["finished"] is True
        assert _board_rows(api) == board


def test_caps(make_ctx, labelled_spec):
    ctx, people = _world(
        make_ctx, labelled_spec, deepen_max_models=1, deepen_max_tasks=1, deepen_max_open=1
    )
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        register(api, people, hub_ref(1))
        register(api, people, hub_ref(2))
        _run_all(api, people)  # nothing open: every count below follows from the caps
        asker = _account(ctx, "asker")
        plan = _plan(budget=12)
        asked = deepen.request(ctx, plan, asker)
        (first,) = asked["scheduled"]
        assert asked["not_considered"] == 1  # the second model, past the model cap
        assert asked["tasks"] == 1 and asked["samples"] == 4  # the task cap
        # the same plan again continues: its open samples are not asked twice
        more = deepen.request(ctx, plan, asker)
        assert more["tasks"] == 1 and more["scheduled"][0]["in_flight"] == 4
        assert more["scheduled"][0]["model_id"] == first["model_id"]
        ids = [i for t in _tasks(ctx, TASK_DEEPEN) for i in t.sample_ids]
        assert len(ids) == len(set(ids)) and set(ids) <= PHYSICS
        assert [t.part for t in _tasks(ctx, TASK_DEEPEN)] == [0, 1]
        with pytest.raises(RateLimitedError, match="at most 1 at once"):
            deepen.request(ctx, _plan(budget=11), asker)
        # another account is not held by this one's open plans
        with ctx.db.read() as session:
            second = session.scalars(
                select(Task.model_id).where(Task.model_id != first["model_id"])
            ).first()
            ref = session.get_one(Model, second).ref
        named = _plan(budget=11, models={"select": "named", "names": [ref, "nobody/none"]})
        other = deepen.request(ctx, named, _account(ctx, "other"))
        assert [e["model_id"] for e in other["scheduled"]] == [second]
        assert other["skipped"] == [
            {
                "model_id": None,
                "model": "nobody/none",
                "ref": None,
                "reason": "no such public model",
            }
        ]
        assert other["tasks"] == 1 and other["not_considered"] == 0
        with ctx.db.read() as session:
            count = session.scalar(
                select(func.count()).select_from(Task).where(Task.purpose == TASK_DEEPEN)
            )
        assert count == 3


def test_a_plan_that_selects_nothing_here_is_refused(make_ctx, labelled_spec):
    ctx, _ = _world(make_ctx, labelled_spec)
    plan = parse_plan({"labels": {"language": ["ko"]}})
    with pytest.raises(NotFoundError, match="nothing to deepen"):
        deepen.request(ctx, plan, _account(ctx, "asker"))
    assert deepen.progress(ctx, plan.id) == {
        "plan_id": plan.id,
        "pending": 0,
        "leased": 0,
        "disputed": 0,
        "done": 0,
        "unresolved": 0,
        "tasks": 0,
        "samples": 0,
        "samples_done": 0,
        "finished": False,
        "models": [],
    }


def test_the_plans_model_selection_picks_the_models(make_ctx, labelled_spec):
    ctx, people = _world(make_ctx, labelled_spec)
    ctx.inspector = lambda ref: fake_metadata(ref, params=10**9 if "model-2" in ref else 1000)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as api:
        assert register(api, people, hub_ref(1)).status_code == 201
        assert register(api, people, hub_ref(2)).status_code == 201
        asker = _account(ctx, "asker")
        small = deepen.request(ctx, _plan(models={"select": "filter", "max_params": 10**6}), asker)
        assert [e["ref"] for e in small["scheduled"]] == [hub_ref(1)]
        ggufs = deepen.request(ctx, _plan(models={"select": "filter", "kinds": ["gguf"]}), asker)
        assert ggufs["scheduled"] == ggufs["skipped"] == [] and ggufs["tasks"] == 0
        every = deepen.request(ctx, _plan(), asker)  # ranked: both; the first has its tasks
        assert [e["ref"] for e in every["scheduled"]] == [hub_ref(2)]
        assert [e["ref"] for e in every["skipped"]] == [hub_ref(1)]
