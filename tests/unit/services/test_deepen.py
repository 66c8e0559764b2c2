"""Deepen tasks, without a server: the log's recomputed board leaves them out, the
plan's draw seed, and what a task's status, finality and lease make of its state."""

from __future__ import annotations

import pytest

from quorumbench.core.plans import parse_plan
from quorumbench.core.publiclog import entry_leaf, leaderboard_from_log
from quorumbench.protocol import TaskStatus
from quorumbench.services.deepen import STATES, _state, plan_seed


def _entry(task_id: int, score: float, **task: object) -> dict:
    return {
        "task": {
            "id": task_id,
            "model": {"id": 1, "ref": "hf:o/m@" + "0" * 40},
            "benchmark": {"name": "arith", "version": 1, "dataset_sha256": "d" * 64},
            "n_samples": 2,
            "sample_ids": [f"s{task_id}a", f"s{task_id}b"],
            **task,
        },
        "results": [],
        "consensus": {"status": "DONE", "score": score, "sample_consensus": [score, score]},
    }


def test_the_board_recomputed_from_the_log_leaves_deepen_tasks_out() -> None:
    entries = [
        _entry(1, 0.5),
        _entry(2, 1.0, purpose="deepen", plan="p" * 64),
        _entry(3, 0.5, purpose="epoch"),
    ]
    rows = [
        {"index": i, "leaf_hash": entry_leaf(e).hex(), "entry": e} for i, e in enumerate(entries)
    ]
    acc, stats = leaderboard_from_log(rows)[(1, "arith")]
    assert (acc.n_tasks, acc.n_samples) == (2, 4)
    assert stats.score == pytest.approx(0.5)  # the deepen task's 1.0 is not in it


def test_the_draw_seed_is_the_plans_own_or_its_public_id() -> None:
    seeded = parse_plan({"versions": {"seed": "abc123"}})
    assert plan_seed(seeded) == "abc123"
    plain = parse_plan({"labels": {"language": ["ko"]}})
    with_endpoint = parse_plan(
        {"labels": {"language": ["ko"]}, "endpoints": [{"url": "https://x.test", "model": "m"}]}
    )
    assert plan_seed(plain) == plain.id == plan_seed(with_endpoint) != with_endpoint.id


@pytest.mark.parametrize(
    ("status", "final", "leased", "state"),
    [
        (TaskStatus.PENDING, False, False, "pending"),
        (TaskStatus.PENDING, False, True, "leased"),
        (TaskStatus.DISPUTED, False, False, "disputed"),
        (TaskStatus.DISPUTED, False, True, "leased"),
        (TaskStatus.DONE, True, False, "done"),
        (TaskStatus.DISPUTED, True, False, "unresolved"),
    ],
)
def test_a_tasks_state(status: TaskStatus, final: bool, leased: bool, state: str) -> None:
    assert _state(status, final, leased) == state
    assert state in STATES
