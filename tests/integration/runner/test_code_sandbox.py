"""Generated code runs in a fresh sandbox per program: real HumanEval problems, hostile
completions, real bubblewrap and the real ``unshare`` fallback.

Each hostile completion does its harm first and then the correct thing (the problem's
canonical solution), so it passes if the harm did not stop it: that it fails proves
the sandbox stopped the harm. After each one, the next problem still passes, and the
test checks from outside that nothing was written, nothing connected, and no process
or cgroup was left behind.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import socket
from pathlib import Path
from urllib.parse import quote

import pytest

from quorumbench.benchmarks import _code
from quorumbench.benchmarks.humaneval import HumanEvalBenchmark, humaneval_program
from quorumbench.evaluation.backend import GenerateResult
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.runner.code_exec import CodeRunner
from quorumbench.runner.loop import Runner, TaskEvaluator

from . import test_sandbox
from .test_sandbox import SANDBOXES, SECRET, descendants, leftover_cgroups, sandbox_for

fake_home = test_sandbox.fake_home
no_stray_processes = test_sandbox.no_stray_processes  # autouse: nothing left running

pytestmark = pytest.mark.slow
TIMEOUT_S = 3.0
REV = "0" * 40


@pytest.fixture(scope="module")
def canonical(humaneval_package):
    """The canonical solution of every problem, by sample id."""
    lines = gzip.decompress(humaneval_package.read_bytes()).decode().splitlines()
    return {f"{i:03d}": json.loads(line)["canonical_solution"] for i, line in enumerate(lines)}


@pytest.fixture(params=SANDBOXES)
def runner(request, fake_home, monkeypatch):
    monkeypatch.setattr(_code, "TIMEOUT_S", TIMEOUT_S)
    return CodeRunner(sandbox_for(request.param))


def bench_for(runner: CodeRunner) -> HumanEvalBenchmark:
    return HumanEvalBenchmark(BenchmarkContext(executor=runner))


def test_canonical_solutions_pass_and_wrong_ones_fail(runner, canonical):
    bench = bench_for(runner)
    ids = ["000", "010", "032", "053", "163"]
    for sample in bench.samples(ids):
        right = bench.score(sample, GenerateResult(canonical[sample.id], 10, "stop"))
        assert right.correct and right.score == 1.0, sample.id
    wrong = bench.score(bench.samples(["053"])[0], GenerateResult("    return x - y\n", 5, "stop"))
    assert not wrong.correct and wrong.score == 0.0


def run_hostile(runner: CodeRunner, canonical: dict[str, str], harm: str, sample_id: str = "000"):
    """``harm`` (function-body lines), then the right answer: its execution (the
    benchmark scores anything but ``passed`` as 0, ``tests/unit/benchmarks``)."""
    bench = bench_for(runner)
    sample = bench.samples([sample_id])[0]
    body = "".join(f"    {line}\n" for line in harm.strip("\n").splitlines())
    fields = sample.fields
    program = humaneval_program(
        fields["prompt"], body + canonical[sample_id], fields["test"], fields["entry_point"]
    )
    running = descendants(os.getpid())
    execution = runner.run(program, timeout_s=TIMEOUT_S)
    assert descendants(os.getpid()) - running == set()
    assert leftover_cgroups() == []
    assert execution.status != "passed", execution  # the problem fails (scores 0)
    following = bench.samples(["001"])[0]
    assert bench.score(following, GenerateResult(canonical["001"], 9, "stop")).correct
    return execution


def test_no_connection_leaves_the_sandbox(runner, canonical):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    for address in [("127.0.0.1", port), ("1.1.1.1", 53)]:
        harm = f"import socket\nsocket.create_connection({address!r}, timeout=2)"
        execution = run_hostile(runner, canonical, harm)
        assert execution.status == "failed", execution
        assert "Network is unreachable" in execution.detail or "refused" in execution.detail
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_a_fork_bomb_fails_its_problem_and_is_gone(runner, canonical):
    execution = run_hostile(runner, canonical, "import os\nwhile True:\n    os.fork()")
    assert execution.status in ("failed", "timeout"), execution


def test_writes_outside_the_private_tmp_fail_and_leave_nothing(
    runner, canonical, tmp_path, monkeypatch
):
    cwd = tmp_path / "runner-cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    targets = [cwd / "escaped.txt", Path("/etc/qb-escaped"), Path.home() / "escaped.txt"]
    if Path("/work").is_dir():
        targets.append(Path("/work/qb-escaped"))
    for target in targets:
        harm = f"open({str(target)!r}, 'w').write('escaped')"
        execution = run_hostile(runner, canonical, harm)
        assert execution.status == "failed", (target, execution)
        assert not target.exists(), target
    assert sorted(cwd.iterdir()) == []
    # its own /tmp is writable (and gone afterwards)
    execution = runner.run("open('/tmp/mine.txt', 'w').write('ok')", timeout_s=TIMEOUT_S)
    assert execution.status == "passed" and not Path("/tmp/mine.txt").exists()


def test_an_endless_loop_is_killed_at_its_timeout(runner, canonical):
    execution = run_hostile(runner, canonical, "while True:\n    pass")
    assert execution.status == "timeout"
    assert TIMEOUT_S <= execution.seconds < TIMEOUT_S + 5


def test_a_huge_allocation_hits_the_memory_limit(runner, canonical):
    execution = run_hostile(runner, canonical, "hoard = bytearray(16 << 30)")
    assert execution.status == "failed" and "MemoryError" in execution.detail


def test_the_key_and_home_are_not_there(runner, canonical, fake_home):
    key = fake_home / ".ssh" / "id_ed25519"
    for harm in [f"print(open({str(key)!r}).read())", f"import os\nos.listdir({str(fake_home)!r})"]:
        execution = run_hostile(runner, canonical, harm)
        assert execution.status == "failed" and "FileNotFoundError" in execution.detail
        assert SECRET not in execution.detail
    probe = "import sys, os\nassert not any('site-packages' in p for p in sys.path if 'venv' in p)"
    probe += "\nassert not os.path.exists(os.path.expanduser('~/.ssh'))"
    assert runner.run(probe, timeout_s=TIMEOUT_S).status == "passed"


@pytest.mark.model
def test_humaneval_end_to_end_with_the_real_model(smollm2_backend, fake_home):
    """SmolLM2-135M on 5 problems, each program in a bubblewrap sandbox: the pipeline,
    not the score (a 135M model may well solve none)."""
    runner = CodeRunner(sandbox_for("bwrap"))
    bench = HumanEvalBenchmark(BenchmarkContext(executor=runner, max_new_tokens=64))
    config = EvalConfig(n=5, seed="code-e2e", batch_size=5, prompt_style="plain")
    result = evaluate(bench, smollm2_backend, config)
    assert result.benchmark["name"] == "humaneval" and result.benchmark["prompt_style"] == "plain"
    assert len(result.samples) == 5 and runner.kind == "bwrap"
    assert all(s.score in (0.0, 1.0) and s.correct is (s.score == 1.0) for s in result.samples)
    assert all(isinstance(s.output, str) and len(s.output_sha256) == 64 for s in result.samples)
    assert result.sample_predictions == [s.prediction for s in result.samples]
    assert len(result.predictions_sha256) == 64
    assert result.samples[0].labels["format"] == "code"
    assert 0.0 <= result.aggregate.mean <= 1.0 and result.aggregate.n == 5


def test_the_runner_scores_a_humaneval_task_in_its_sandbox(fake_home, humaneval_package):
    """The runner's loop on a HumanEval task: the programs run in the evaluator's
    executor, and the signed payload carries their verdicts (problem 002's answer)."""
    executor = CodeRunner(sandbox_for("bwrap"))
    bench = HumanEvalBenchmark(BenchmarkContext(executor=executor))
    ids = ["002", "005"]
    task = {
        "id": 1,
        "epoch": 1,
        "round": 1,
        "model": {"id": 1, "ref": f"mock:say/{quote('    return number % 1.0', safe='')}@{REV}"},
        "benchmark": {
            "name": bench.name,
            "version": bench.version,
            "prompt_version": bench.prompt_version,
            "dataset_sha256": bench.dataset_sha256,
            "config": dict(bench.config),
        },
        "n_samples": 2,
        "seed_commitment": hashlib.sha256(b"code").hexdigest(),
        "sample_ids": ids,
    }
    client = test_sandbox.FakeClient([task])
    outcome = Runner(client, TaskEvaluator(executor=executor)).run_once()
    assert outcome.status == "submitted", outcome
    payload = client.submitted[0]
    assert payload["sample_ids"] == ids and payload["sample_scores"] == [1.0, 0.0]
    assert payload["sample_predictions"] == ["    return number % 1.0"] * 2


def test_a_runner_without_an_executor_gives_a_code_task_back(humaneval_package):
    bench = HumanEvalBenchmark(BenchmarkContext())
    task = {
        "id": 1,
        "epoch": 1,
        "round": 1,
        "model": {"id": 1, "ref": f"mock:empty@{REV}"},
        "benchmark": {
            "name": bench.name,
            "version": bench.version,
            "prompt_version": bench.prompt_version,
            "dataset_sha256": bench.dataset_sha256,
            "config": dict(bench.config),
        },
        "n_samples": 1,
        "seed_commitment": hashlib.sha256(b"code").hexdigest(),
        "sample_ids": ["000"],
    }
    client = test_sandbox.FakeClient([task])
    outcome = Runner(client, TaskEvaluator()).run_once()
    assert outcome.status == "setup-error" and "no executor" in outcome.detail
    assert client.released == [100] and client.submitted == []
