"""Edge tasks end to end: the server schedules one, three runners run the real
SmolLM2-135M through the edge workload and sign their reports, the task closes, the
figures are shown per hardware class, and ``quorumbench verify`` checks every report.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from pydantic import SecretStr
from rich.console import Console

from quorumbench.api.app import create_app
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.verify_cmd import verify
from quorumbench.evaluation.edge import EDGE_VERSION, workload_sha256
from quorumbench.runner.loop import build_runner
from quorumbench.services.accounts import create_account, issue_token
from quorumbench.settings import RunnerSettings, ServerSettings

from .test_runner_e2e import init_runner

pytestmark = [pytest.mark.model, pytest.mark.slow]

RUNNERS = ("r1", "r2", "r3")
WORKLOAD = {
    "edge_prompt_tokens": 24,
    "edge_gen_tokens": 6,
    "edge_warmup": 1,
    "edge_min_runs": 2,
    "edge_min_time_s": 0.0,
    "edge_max_runs": 4,
}


@pytest.fixture
def live(tmp_path, smollm2_gguf) -> Iterator[EmbeddedServer]:
    settings = ServerSettings(
        data_dir=tmp_path,
        quorum=3,
        samples_per_task=2,
        benchmarks=["arith"],
        scheduler_interval_s=0.2,
        registrations_per_week=100,
        quota_evaluations=0,
        canary_rate=0.0,
        edge_every_epochs=1,
        edge_runners=3,
        **WORKLOAD,
    )
    with EmbeddedServer(create_app(settings)) as server:
        yield server


def _pull(
    api: httpx.Client, token: str, version: str, engines: list[str] | None = None
) -> httpx.Response:
    body: dict[str, object] = {"protocol_version": version, "runner": "probe"}
    if engines is not None:
        body["engines"] = engines
    return api.post("/v0/leases", json=body, headers={"Authorization": f"Bearer {token}"})


def test_runners_measure_an_edge_task_and_verify_checks_it(live, model_cache_dir, tmp_path):
    ctx = live.app.state.context
    create_account(ctx, "admin", is_admin=True)
    admin = issue_token(ctx, "admin", scopes=("admin",)).token
    tokens = {}
    for name in (*RUNNERS, "late"):
        create_account(ctx, name)
        tokens[name] = issue_token(ctx, name, scopes=("task:pull", "task:submit")).token

    with httpx.Client(base_url=live.url, timeout=120) as api, ExitStack() as stack:
        registered = api.post(
            "/v0/models",
            json={"ref": "bundled:smollm2-135m-instruct"},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert registered.status_code == 201, registered.text
        model = registered.json()
        runners = []
        for name in RUNNERS:
            key_file = tmp_path / f"{name}.key"
            init_runner(live.url, tokens[name], f"{name}-box", key_file)
            settings = RunnerSettings(
                _env_file=None,
                server_url=live.url,
                token=SecretStr(tokens[name]),
                name=f"{name}-box",
                key_file=key_file,
                cache_dir=model_cache_dir,
                device="cpu",
                batch_size=2,
            )
            runners.append(stack.enter_context(build_runner(settings)))

        # scored tasks go first: each runner's first task is the arith one
        scored = [runner.run_once() for runner in runners]
        assert [o.status for o in scored] == ["submitted"] * 3, scored
        assert scored[-1].detail == "task is DONE"

        # only the edge task is left: a runner of protocol 1.1 is not offered it, nor
        # one of 1.2 (it lists no engines, and would run the GGUF file de-quantized),
        # nor one of 1.3 without llama.cpp
        assert _pull(api, tokens["late"], "1.1").status_code == 204
        assert _pull(api, tokens["late"], "1.2").status_code == 204
        assert _pull(api, tokens["late"], "1.3", ["transformers"]).status_code == 204
        offered = _pull(api, tokens["late"], "1.3", ["transformers", "llamacpp"])
        assert offered.status_code == 201, offered.text
        assert offered.json()["task"]["model"]["engine"] == "llamacpp"
        bench = offered.json()["task"]["benchmark"]
        assert bench["kind"] == "edge"
        assert bench["name"] == "edge-24-6" and bench["version"] == EDGE_VERSION
        assert bench["dataset_sha256"] == workload_sha256()
        assert bench["config"] == {
            "prompt_tokens": 24,
            "gen_tokens": 6,
            "warmup": 1,
            "min_runs": 2,
            "min_time_s": 0.0,
            "max_runs": 4,
        }
        lease = offered.json()
        released = api.delete(
            f"/v0/leases/{lease['lease_id']}",
            params={"attempt": lease["attempt"], "runner": "probe"},
            headers={"Authorization": f"Bearer {tokens['late']}"},
        )
        assert released.status_code == 204

        edge = [runner.run_once() for runner in runners]
        assert [o.status for o in edge] == ["submitted"] * 3, edge
        assert edge[-1].detail == "task is DONE"
        assert edge[0].score is None

        task = api.get(f"/v0/tasks/{edge[0].task_id}").json()
        assert task["status"] == "DONE" and task["score"] is None and task["results"] == []
        reports = task["edge_reports"]
        assert len(reports) == 3 and all(r["counted"] and r["runs"] >= 2 for r in reports)
        assert all(r["decode_tokens_per_s"] > 0 and r["ttft_s"] > 0 for r in reports)
        task_page = api.get(f"/tasks/{edge[0].task_id}").text
        assert 'id="edge-reports"' in task_page and "r2/r2-box" in task_page

        figures = api.get("/v0/edge", params={"model_id": model["id"]}).json()
        assert figures["workload"]["prompt_tokens"] == 24
        (row,) = figures["rows"]
        assert row["runners"] == 3  # three runner names on one machine: one class
        assert row["hardware_class"].startswith("cpu:")
        assert row["forced_length"] is True
        for name in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_s"):
            value = row[name]
            assert value["n"] == 3 and 0 < value["low"] <= value["median"] <= value["high"]
        assert row["peak_rss_bytes"]["low"] > 100 * 2**20  # the loaded model is in it

        page = api.get(f"/models/{model['id']}").text
        assert 'id="edge-by-class"' in page and row["hardware_class"] in page

        # nothing of the edge task reaches the board: still one arith task there
        board = api.get("/v0/leaderboard", params={"benchmark": "arith"}).json()
        (board_row,) = [r for r in board["rows"] if r["model_id"] == model["id"]]
        assert board_row["n_tasks"] == 1

    report = verify(live.url, tmp_path / "verify.json", Console())
    assert report.problems == [], report.problems
    assert report.edge_signatures_checked == 3
