"""A runner that flips k of a task's 5 answers on purpose, against honest runners.

Real processes throughout (the chaos harness): ``quorumbench serve`` on SQLite with
the default consensus rule (quorum 3, score threshold 0.5, per-sample tolerance 0.2,
5 samples per task), honest runner processes (chaos_runner.py) of four accounts, and
one flipping runner process (flip_runner.py) of a fifth. The flipper works first, so
it has a result in every task; it flips k = 1..5 answers depending on the model.

* k = 1 is within the tolerance (one sample of five may differ, as batch arithmetic
  can make it): the flipper agrees and the task is DONE in the first round.
* Every k >= 2 is outvoted: in the first round two honest results against it are no
  agreement of three (DISPUTED), in the second the four honest results agree and the
  flipper's result is an outlier; it loses reputation and ends suspended. With k = 2
  its task score lies within 0.5 of the honest one: the score rule alone let it pass.

Every task ends with the honest score, and ``quorumbench verify`` passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import func, select

from quorumbench.benchmarks import load_benchmark
from quorumbench.cli.verify_cmd import verify
from quorumbench.db.models import Account, Epoch, Result, Runner, Task
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples

from ..chaos.harness import (
    WRONG_EVERY,
    Fleet,
    ServerProcess,
    database,
    describe,
    free_port,
    progress,
    seed,
    settings_for,
    wait_until,
)

pytestmark = pytest.mark.slow

FLIP_SCRIPT = Path(__file__).with_name("flip_runner.py")
N_SAMPLES = 5
N_MODELS = 10
FLIPS = {model: (model - 1) % N_SAMPLES + 1 for model in range(1, N_MODELS + 1)}
"""Model number -> answers the flipper flips: 1, 2, 3, 4, 5, 1, 2, 3, 4, 5."""
HONEST = ["honest1", "honest2", "honest3", "honest4"]


def _selection(db, path: Path) -> Path:
    """The epoch's 5 arith sample ids, derived once for every runner process."""
    with db.read() as session:
        [epoch_seed] = session.scalars(select(Epoch.seed)).all()
    bench = load_benchmark("arith", BenchmarkContext(None))
    ids = [s.id for s in select_samples(bench, N_SAMPLES, epoch_seed)]
    preset = {"benchmark": "arith", "n": N_SAMPLES, "seed": epoch_seed, "ids": ids}
    path.write_text(json.dumps(preset), encoding="utf-8")
    return path


def _spawn_flipper(tmp_path: Path, url: str, token: str, selection: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QB_")}
    env["QB_CHAOS_TOKEN"] = token
    command = [sys.executable, str(FLIP_SCRIPT), "--flips", json.dumps(FLIPS)]
    command += ["--url", url, "--name", "flipper-box", "--journal", str(tmp_path / "flip.jsonl")]
    command += ["--wrong-every", str(WRONG_EVERY), "--work-s", "0", "--selection", str(selection)]
    log = open(tmp_path / "flip.log", "wb")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
    finally:
        log.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def test_a_runner_flipping_two_or_more_of_five_answers_is_outvoted(tmp_path):
    # registering a model makes its task: the seeding settings must ask for 5 samples too
    settings = settings_for(tmp_path / "data", None).model_copy(
        update={"samples_per_task": N_SAMPLES}
    )
    world = seed(settings, N_MODELS, ["flipper", *HONEST])
    env = {"QB_SAMPLES_PER_TASK": str(N_SAMPLES), "QB_OUTLIER_LIMIT": "5"}
    server = ServerProcess(tmp_path, world, free_port(), env)
    fleet = Fleet(tmp_path, server.url, {a: world.tokens[a] for a in HONEST}, per_account=1)
    flipper = None
    try:
        server.start()
        with database(world.url) as db:
            with db.read() as session:
                flipper_id = session.scalar(select(Account.id).where(Account.name == "flipper"))

            def dump() -> str:
                log = (tmp_path / "flip.log").read_text(errors="replace")[-1500:]
                return describe(db, fleet, server) + "\n--- flipper log:\n" + log

            def flipper_results() -> int:
                with db.read() as session:
                    query = select(func.count()).where(Result.account_id == flipper_id)
                    return session.scalar(query) or 0

            wait_until(lambda: progress(db)[0] == N_MODELS, 60, "the tasks", dump)
            selection = _selection(db, tmp_path / "selection.json")
            flipper = _spawn_flipper(tmp_path, server.url, world.tokens["flipper"], selection)
            # the flipper first: one result in every task before any honest runner works
            wait_until(lambda: flipper_results() == N_MODELS, 120, "the flipper", dump)
            fleet.selection = selection
            fleet.start()
            wait_until(lambda: progress(db)[1] == N_MODELS, 180, "every task to end", dump)
            fleet.stop()
            _stop(flipper)

            with db.read() as session:
                tasks = session.scalars(select(Task).order_by(Task.id)).all()
                results = session.scalars(select(Result)).all()
                runners = {r.account_id: r for r in session.scalars(select(Runner))}
            models = world.models  # model id -> model number
            for task in tasks:
                number = models[task.model_id]
                k = FLIPS[number]
                honest = 0.0 if number % WRONG_EVERY == 0 else 1.0
                mine = [r for r in results if r.task_id == task.id]
                [flip] = [r for r in mine if r.account_id == flipper_id]
                others = [r for r in mine if r.account_id != flipper_id]
                what = (task.id, number, k, task.status, task.round, flip.outlier)
                assert task.status == "DONE" and task.score == honest, what
                assert abs(flip.score - honest) == pytest.approx(k / N_SAMPLES), what
                assert all(r.counted and not r.outlier and r.score == honest for r in others)
                assert flip.counted and flip.outlier == (k >= 2), what
                assert task.round == (1 if k == 1 else 2), what
                assert len(others) == (2 if k == 1 else 4), what
                if k == 2:  # what the score rule alone would have let through
                    assert abs(flip.score - honest) <= 0.5
            cheat = runners[flipper_id]
            outvoted = sum(1 for k in FLIPS.values() if k >= 2)
            assert (cheat.agreements, cheat.outliers) == (N_MODELS - outvoted, outvoted)
            assert cheat.suspended
            assert all(
                r.outliers == 0 and not r.suspended for r in runners.values() if r is not cheat
            )
        assert not fleet.unexpected_exits(), "\n".join(fleet.unexpected_exits())
        report = verify(server.url, tmp_path / "verify.json", Console())
        assert report.problems == [] and report.size == N_MODELS
    finally:
        fleet.stop()
        if flipper is not None:
            _stop(flipper)
        server.stop()
