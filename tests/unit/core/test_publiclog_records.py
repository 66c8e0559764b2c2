"""The log's records that are not tasks (a pool's payout) stay out of the task checks."""

from __future__ import annotations

from quorumbench.core.publiclog import (
    check_canaries,
    check_result_predictions,
    check_result_signatures,
    is_task,
    leaderboard_from_log,
    task_rows,
)

PAYOUT = {"index": 0, "leaf_hash": "0" * 64, "entry": {"payout": {"pool": {"id": 1}}}}
TASK = {
    "index": 1,
    "leaf_hash": "1" * 64,
    "entry": {
        "task": {
            "id": 9,
            "model": {"id": 3, "ref": "hf:a/b@" + "0" * 40},
            "benchmark": {"name": "sums", "version": 1, "dataset_sha256": "a" * 64},
            "n_samples": 2,
            "sample_ids": ["s0", "s1"],
        },
        "results": [],
        "consensus": {"status": "DONE", "score": 0.5, "sample_consensus": [1.0, 0.0]},
    },
}


def test_payout_records_are_not_tasks():
    assert not is_task(PAYOUT) and is_task(TASK)
    assert not is_task({"index": 2, "entry": None})
    assert task_rows([PAYOUT, TASK]) == [TASK]


def test_task_checks_skip_payout_records():
    rows = [PAYOUT, TASK]
    assert check_result_signatures(rows, lambda *_: True) == ([], 0)
    assert check_result_predictions(rows) == ([], 0)
    assert check_canaries(rows) == []
    board = leaderboard_from_log(rows)
    assert list(board) == [(3, "sums")] and board[(3, "sums")][0].n_samples == 2
