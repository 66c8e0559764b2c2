"""What the demo says when its tasks are not final in time (``cli/_demo_wait.py``):
which tasks are open and what each runner last said about a task, not "no consensus"."""

from __future__ import annotations

from quorumbench.cli._demo_wait import stall_report

ALICE = """\
[12/06/26 17:56:51] INFO     model code runs in a bwrap sandbox: no network, 18078 MB of address
                             space, 512 processes, 3600 s per task
                    INFO     task 3 (lease 9):
                             bundled:smollm2-135m-instruct@b179c9523d0e6a0f98a330c7562b682750a6f8c8c
                             15e5bc70ea373728110db53 on humaneval, 1 samples
[12/06/26 17:57:31] INFO     task 3: 0/1 samples, 30 s
[12/06/26 17:58:01] WARNING  POST /v0/leases/9/heartbeat failed (ReadTimeout); retrying
[12/06/26 17:58:31] INFO     task 3: 0/1 samples, 90 s
"""


def task(task_id, final, status, benchmark="humaneval", model="SmolLM2-135M-Instruct"):
    return {
        "id": task_id,
        "final": final,
        "status": status,
        "benchmark": {"name": benchmark, "version": 1},
        "model": {"id": 1, "name": model},
    }


def test_it_names_the_open_tasks_and_what_each_runner_last_said(tmp_path):
    (tmp_path / "runner-alice.log").write_text(ALICE)
    (tmp_path / "runner-bob.log").write_text("[12/06/26 17:56:51] INFO     runner 'bob' ready\n")
    tasks = [task(1, True, "DONE", "arith"), task(3, False, "PENDING")]
    report = stall_report(
        tasks, {"alice": tmp_path / "runner-alice.log", "bob": tmp_path / "runner-bob.log"}
    )
    assert report.startswith("1 of 2 final; still open: task 3 (humaneval on ")
    assert "SmolLM2-135M-Instruct, PENDING)" in report
    assert "alice: task 3: 0/1 samples, 90 s;" in report  # the last task line, no stamp
    assert "bob: no task yet" in report
    assert f"(their logs: {tmp_path})" in report


def test_a_wrapped_record_is_joined_and_a_missing_log_is_no_task(tmp_path):
    (tmp_path / "runner-carol.log").write_text(ALICE.rsplit("[12/06/26 17:57:31]", 1)[0])
    report = stall_report(
        [task(3, False, "DISPUTED")],
        {"carol": tmp_path / "runner-carol.log", "dan": tmp_path / "absent.log"},
    )
    assert (
        "carol: task 3 (lease 9): bundled:smollm2-135m-instruct@"
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c 15e5bc70ea373728110db53 on humaneval, "
        "1 samples;"
    ) in report
    assert (
        "dan: no task yet" in report and "(humaneval on SmolLM2-135M-Instruct, DISPUTED)" in report
    )
