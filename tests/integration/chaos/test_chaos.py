"""Chaos: SIGKILLed runners and a SIGKILLed server lose no task and count none twice.

Over 100 tasks (one per model, quorum 3) are worked by runner processes of more
accounts than the quorum while the test kills, at seeded random moments, either
runner processes (each replaced at once under the same runner name) or the server
itself (restarted on the same port and database). Afterwards every task must be
DONE with exactly ``quorum`` counted results from distinct accounts, the leaderboard
must count each task once, and every submission a runner saw acknowledged must be
stored. See harness.py for the processes and the checks.
"""

from __future__ import annotations

import pytest

from .harness import QUORUM, run_chaos

pytestmark = pytest.mark.slow

N_MODELS = 105
RUNNER_KILLS = 16


def test_sigkilled_runners_lose_no_task_and_count_none_twice(tmp_path):
    stats = run_chaos(
        tmp_path,
        None,
        rng_seed=20261122,
        n_models=N_MODELS,
        victim="runner",
        kills=RUNNER_KILLS,
        accounts=5,
        per_account=2,
    )
    assert stats["runner_kills"] == RUNNER_KILLS
    assert stats["results"] == N_MODELS * QUORUM
    # some runners died holding a lease: their slots came back only by expiry
    assert stats["expired_leases"] >= 1, stats


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_sigkilled_server_loses_no_acknowledged_submission(tmp_path, request, backend):
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    stats = run_chaos(
        tmp_path,
        url,
        rng_seed=20261123,
        n_models=N_MODELS,
        victim="server",
        kills=3,
        accounts=4,
        per_account=1,
    )
    assert stats["server_kills"] == 3
    assert stats["results"] == N_MODELS * QUORUM
