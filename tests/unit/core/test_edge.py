"""The server's check of an edge report (its figures must follow from its runs, for the
task's workload), the per-class spread, and ``verify``'s check of the logged reports
with a real Ed25519 signature."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from quorumbench.core.canonical import sha256_hex
from quorumbench.core.edge import Spread, check_edge_reports, report_problems, spread
from quorumbench.core.signing import result_digest, result_message
from quorumbench.evaluation.edge import (
    EDGE_VERSION,
    EdgeResult,
    EdgeRun,
    EdgeSettings,
    edge_benchmark_name,
    workload_sha256,
)
from quorumbench.protocol import EdgeReport
from quorumbench.runner.edge_task import edge_report

SETTINGS = EdgeSettings(
    prompt_tokens=64, gen_tokens=8, warmup=1, min_runs=2, min_time_s=0.0, max_runs=4
)
WORKLOAD = SETTINGS.to_config()
TASK_ID = 41


def run(**changes: Any) -> EdgeRun:
    base: dict[str, Any] = {
        "wall_s": 0.5,
        "generated_tokens": 8,
        "finish_reason": "length",
        "prompt_tokens": 64,
        "ttft_s": 0.125,
        "decode_tokens_per_s": 20.0,
        "peak_rss_bytes": 1_000,
        "peak_gpu_bytes": None,
    }
    return EdgeRun(**(base | changes))


RUNS = (
    run(),
    run(wall_s=0.75, ttft_s=0.25, decode_tokens_per_s=24.0, peak_rss_bytes=3_000),
    run(wall_s=0.625, ttft_s=0.2, decode_tokens_per_s=22.5, peak_rss_bytes=2_000),
)


def result(runs: tuple[EdgeRun, ...] = RUNS, settings: EdgeSettings = SETTINGS) -> EdgeResult:
    return EdgeResult(
        model={"ref": "bundled:tiny", "device": "cpu"},
        settings=settings,
        hardware={"cpu_model": "Test CPU", "cpu_count": 2},
        hardware_class="cpu:test-cpu:2c",
        libraries={"llama_cpp_python": "0.3"},
        runs=runs,
        notes=("peak GPU memory: no GPU",),
    )


def report(runs: tuple[EdgeRun, ...] = RUNS, **changes: Any) -> EdgeReport:
    """A report as the runner makes it from ``runs``, with ``changes`` (JSON values)."""
    body = edge_report(TASK_ID, result(runs)).model_dump(mode="json")
    return EdgeReport.model_validate(body | changes)


def problems(rep: EdgeReport, workload: dict[str, Any] = WORKLOAD) -> list[str]:
    return report_problems(rep, TASK_ID, EDGE_VERSION, workload)


def stat(mean: float, sd: float, n: int) -> dict[str, Any]:
    return {"mean": mean, "sd": sd, "n": n}


def test_the_runners_own_report_has_no_problem():
    rep = report()
    assert rep.forced_length and rep.peak_rss_bytes == 3_000 and rep.peak_gpu_bytes is None
    assert rep.prefill_tokens_per_s is not None and rep.prefill_tokens_per_s.n == 3
    assert problems(rep) == []


def test_a_report_of_another_task_version_or_workload_is_refused():
    rep = report(task_id=TASK_ID + 1, edge_version=EDGE_VERSION + 1)
    found = report_problems(rep, TASK_ID, EDGE_VERSION, WORKLOAD | {"max_runs": 3})
    assert len(found) == 3
    assert f"task_id {TASK_ID + 1} is not this lease's task {TASK_ID}" in found[0]
    assert f"edge_version is {EDGE_VERSION + 1}" in found[1]
    assert "settings" in found[2] and "are not the task's" in found[2]


def test_settings_equal_as_numbers_are_the_tasks():
    """A config read back from JSON may hold 0 where the report says 0.0."""
    assert problems(report(), WORKLOAD | {"min_time_s": 0}) == []


@pytest.mark.parametrize("count", [1, 5])
def test_a_run_count_outside_the_repeat_rule_is_refused(count):
    runs = tuple(run() for _ in range(count))
    assert problems(report(runs)) == [f"{count} runs; the task's repeat rule gives 2 to 4"]


def test_a_run_of_another_prompt_length_is_refused():
    runs = (run(), run(prompt_tokens=63, ttft_s=0.125))
    found = problems(report(runs))
    assert found == ["a run read other than the task's 64 prompt tokens"]


def test_a_run_that_does_not_say_its_prompt_tokens_is_not_refused_for_them():
    runs = (run(prompt_tokens=None), run(prompt_tokens=None))
    rep = report(runs)
    assert rep.prefill_tokens_per_s is None  # without prompt tokens there is no rate
    assert problems(rep) == []


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        ("wall_s", {"mean": 0.6}),
        ("wall_s", {"sd": 0.0}),
        ("generated_tokens", {"n": 2}),
        ("ttft_s", {"mean": 0.1}),
        ("decode_tokens_per_s", {"sd": 5.0}),
        ("prefill_tokens_per_s", {"mean": 400.0}),
    ],
)
def test_a_figure_that_does_not_follow_from_the_runs_is_refused(name, changed):
    honest = report().model_dump(mode="json")
    rep = EdgeReport.model_validate(honest | {name: honest[name] | changed})
    (found,) = problems(rep)
    assert found.startswith(f"{name} is ") and "its runs give" in found


def test_a_mean_within_the_tolerance_is_accepted():
    honest = report().model_dump(mode="json")
    wall = honest["wall_s"]
    nudged = wall | {"mean": wall["mean"] * (1 + 1e-9)}  # a float's last digits
    assert problems(EdgeReport.model_validate(honest | {"wall_s": nudged})) == []


def test_a_figure_given_when_a_run_lacks_it_is_refused():
    runs = (run(), run(ttft_s=None, decode_tokens_per_s=None))
    rep = report(runs)
    assert rep.ttft_s is None and rep.prefill_tokens_per_s is None
    assert problems(rep) == []
    invented = report(runs, ttft_s=stat(0.125, 0.0, 1), decode_tokens_per_s=stat(20.0, 0.0, 1))
    assert problems(invented) == [
        "ttft_s is given, but a run has none",
        "decode_tokens_per_s is given, but a run has none",
    ]


def test_a_figure_missing_when_every_run_has_it_is_refused():
    found = problems(report(ttft_s=None, prefill_tokens_per_s=None))
    assert found == [
        "ttft_s is missing, but every run has one",
        "prefill_tokens_per_s is missing, but every run has one",
    ]


def test_a_prefill_rate_needs_a_time_to_first_token_above_zero():
    runs = (run(), run(ttft_s=0.0))
    rep = report(runs)
    assert rep.prefill_tokens_per_s is None and rep.ttft_s is not None
    assert problems(rep) == []
    given = report(runs, prefill_tokens_per_s=stat(512.0, 0.0, 2))
    assert problems(given) == ["prefill_tokens_per_s is given, but a run has none"]


def test_a_prefill_rate_that_is_not_finite_is_refused_not_an_error():
    """A ttft so close to 0 that prompt tokens over it overflow: a problem of the
    report, not an exception (the server would answer 500, verify would stop)."""
    honest = report().model_dump(mode="json")
    honest["runs"][1]["ttft_s"] = 1e-310
    found = problems(EdgeReport.model_validate(honest))
    assert "prefill_tokens_per_s of a run is not a finite number" in found


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"peak_rss_bytes": 2_000}, "peak_rss_bytes"),
        ({"peak_rss_bytes": None}, "peak_rss_bytes"),
        ({"peak_gpu_bytes": 10}, "peak_gpu_bytes"),
    ],
)
def test_a_peak_other_than_the_highest_of_the_runs_is_refused(changes, name):
    assert problems(report(**changes)) == [f"{name} is not the highest of its runs'"]


def test_forced_length_must_match_the_runs():
    assert problems(report(forced_length=False)) == [
        "forced_length does not match the runs' generated tokens"
    ]
    short = (run(), run(generated_tokens=5, finish_reason="stop"))
    rep = report(short)
    assert not rep.forced_length and problems(rep) == []
    assert problems(report(short, forced_length=True)) == [
        "forced_length does not match the runs' generated tokens"
    ]


def test_spread_is_the_median_low_high_and_count_of_the_given_values():
    assert spread([]) is None and spread([None, None]) is None
    assert spread([3.0, None, 1.0, 2.5]) == Spread(median=2.5, low=1.0, high=3.0, n=3)
    assert spread([4.0, 1.0]) == Spread(median=2.5, low=1.0, high=4.0, n=2)


# --- verify: the logged reports --------------------------------------------------------

KEY = SigningKey(bytes(range(32)))
PUBLIC = bytes(KEY.verify_key).hex()
BENCH = {
    "name": edge_benchmark_name(64, 8),
    "version": EDGE_VERSION,
    "dataset_sha256": workload_sha256(),
    "config": WORKLOAD,
}
MODEL_REF = "bundled:tiny"


def ed25519(message: bytes, signature_hex: str, public_key_hex: str) -> bool:
    try:
        VerifyKey(bytes.fromhex(public_key_hex)).verify(message, bytes.fromhex(signature_hex))
    except BadSignatureError:
        return False
    return True


def logged(rep: EdgeReport, *, report_id: int = 1, lease_id: int = 7) -> dict[str, Any]:
    """A report as the public log records it, signed by :data:`KEY`."""
    digest = result_digest(rep)
    signed_at = datetime(2026, 11, 29, 6, tzinfo=UTC).isoformat()
    message = result_message(
        task_id=TASK_ID,
        lease_id=lease_id,
        attempt=1,
        model_ref=MODEL_REF,
        benchmark=BENCH["name"],
        benchmark_version=EDGE_VERSION,
        dataset_sha256=BENCH["dataset_sha256"],
        result_sha256=digest,
        signed_at=signed_at,
    )
    return {
        "id": report_id,
        "report": rep.model_dump(mode="json"),
        "payload_sha256": digest,
        "lease_id": lease_id,
        "attempt": 1,
        "signature": {
            "key_id": sha256_hex(bytes(KEY.verify_key)),
            "public_key": PUBLIC,
            "signed_at": signed_at,
            "value": KEY.sign(message).signature.hex(),
        },
    }


def entry(*items: dict[str, Any], index: int = 3) -> dict[str, Any]:
    task = {"id": TASK_ID, "model": {"ref": MODEL_REF}, "benchmark": BENCH}
    return {"index": index, "entry": {"edge": {"task": task, "reports": list(items)}}}


def test_signed_reports_of_a_closed_edge_task_verify():
    rows = [
        {"index": 0, "entry": {"task": {"id": 1}, "results": []}},  # a scored task's
        {"index": 1, "entry": {"payout": {}}},  # a settled pool's
        {"index": 2, "entry": None},
        entry(logged(report()), logged(report(RUNS[:2]), report_id=2, lease_id=8)),
    ]
    assert check_edge_reports(rows, ed25519) == ([], 2)


def test_an_unsigned_report_is_checked_but_no_signature_counted():
    item = logged(report()) | {"signature": None}
    assert check_edge_reports([entry(item)], ed25519) == ([], 0)


def test_a_tampered_report_no_longer_hashes_to_its_digest():
    item = logged(report())
    item["report"]["notes"] = ["edited after signing"]
    found, checked = check_edge_reports([entry(item)], ed25519)
    assert found == ["entry 3, edge report 1: its report does not hash to its payload_sha256"]
    assert checked == 0


def test_a_tampered_figure_is_a_problem_of_its_report():
    """Figures edited and the digest recomputed: the signature no longer holds, and the
    figures no longer follow from the runs."""
    item = logged(report())
    item["report"]["wall_s"]["mean"] = 0.1
    item["payload_sha256"] = result_digest(EdgeReport.model_validate(item["report"]))
    found, checked = check_edge_reports([entry(item)], ed25519)
    assert checked == 1 and len(found) == 2
    assert found[0].startswith("entry 3, edge report 1: wall_s is 0.1")
    assert found[1] == "entry 3, edge report 1: the runner's signature does not verify"


def test_a_key_id_that_is_not_the_hash_of_the_key_is_a_problem():
    item = logged(report())
    item["signature"]["key_id"] = "0" * 64
    assert check_edge_reports([entry(item)], ed25519) == (
        ["entry 3, edge report 1: key id is not the hash of the public key"],
        1,
    )


def test_a_signature_by_another_key_or_over_another_lease_does_not_verify():
    other = logged(report())
    other["signature"]["value"] = SigningKey(b"\x01" * 32).sign(b"x").signature.hex()
    moved = logged(report(), report_id=2) | {"lease_id": 99}
    found, checked = check_edge_reports([entry(other, moved)], ed25519)
    assert checked == 2
    assert found == [
        "entry 3, edge report 1: the runner's signature does not verify",
        "entry 3, edge report 2: the runner's signature does not verify",
    ]


def test_something_that_is_not_a_report_is_named_not_raised():
    item = logged(report())
    del item["report"]["wall_s"]
    found, checked = check_edge_reports([entry(item)], ed25519)
    assert checked == 0 and len(found) == 1
    assert found[0].startswith("entry 3, edge report 1: not an edge report (")
