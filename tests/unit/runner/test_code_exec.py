"""The executor of generated code without a sandbox (``--no-sandbox``), and what it
says when it cannot run a program. The real sandboxes are tested in
``tests/integration/runner/test_code_sandbox.py``."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import pytest

from quorumbench import protocol
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.errors import CodeExecutorError
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import select_samples
from quorumbench.evaluation.execution import CodeExecutor
from quorumbench.runner.code_exec import OUTPUT_KEEP, CodeRunner, code_env
from quorumbench.runner.evaluator import TaskEvaluator
from quorumbench.runner.faults import RunnerSetupError, fault_of
from quorumbench.runner.sandbox import Limits, Sandbox


@pytest.fixture(scope="module")
def plain():
    return CodeRunner(None)


def test_without_a_sandbox_it_warns_loudly(caplog):
    with caplog.at_level(logging.WARNING, logger="quorumbench.runner"):
        runner = CodeRunner(None)
    assert runner.kind == "none" and isinstance(runner, CodeExecutor)
    assert "NO SANDBOX for generated code" in caplog.text


@pytest.mark.parametrize(
    ("program", "status", "detail"),
    [
        ("assert sorted([2, 1]) == [1, 2]", "passed", ""),
        ("assert 1 == 2, 'nope'", "failed", "AssertionError: nope"),
        ("import sys\nsys.exit(0)", "failed", "SystemExit: 0"),
        ("import os\nos._exit(0)", "failed", "exited before its tests finished"),
        ("def f(:\n", "failed", "SyntaxError"),
        ("x = bytearray(8 << 30)", "failed", "MemoryError"),
    ],
)
def test_a_program_passes_only_when_it_runs_to_its_end(plain, program, status, detail):
    execution = plain.run(program, timeout_s=10)
    assert execution.status == status, execution
    assert detail in execution.detail
    assert execution.seconds > 0


def test_a_program_past_its_time_is_killed(plain):
    execution = plain.run("import time\ntime.sleep(30)", timeout_s=1)
    assert execution.status == "timeout" and execution.seconds < 5


def test_output_is_bounded_and_the_detail_printable(plain):
    execution = plain.run("print('x' * 10_000_000)\nraise ValueError('\\x1b[31mred')", timeout_s=10)
    assert execution.status == "failed"
    assert execution.detail.startswith("ValueError:") and "\x1b" not in execution.detail
    assert len(execution.detail) <= 301 and OUTPUT_KEEP < 10_000_000


def test_the_environment_is_built_from_nothing(plain, monkeypatch, tmp_path):
    monkeypatch.setenv("QB_RUNNER_TOKEN", "qb_secret")
    program = (
        "import os\n"
        "assert 'QB_RUNNER_TOKEN' not in os.environ, 'leaked'\n"
        f"assert os.environ['PYTHONHASHSEED'] == '0'\n"
        f"assert os.getcwd() != {str(Path.cwd())!r}\n"
        "assert not os.listdir('.') or os.listdir('.') == ['program.py']\n"
    )
    assert plain.run(program, timeout_s=10).status == "passed"
    assert "QB_RUNNER_TOKEN" not in code_env()


def test_string_sets_iterate_alike_in_every_run(plain):
    program = "import sys\nprint(list({'apple', 'pear', 'fig', 'kiwi'}))\nsys.exit(3)"
    details = {plain.run(program, timeout_s=10).detail for _ in range(3)}
    assert len(details) == 1


def test_a_sandbox_that_cannot_start_is_an_error_not_a_failure(tmp_path):
    missing = Sandbox("bwrap", str(tmp_path / "no-bwrap"), Limits(1024, 32))
    execution = CodeRunner(missing).run("pass", timeout_s=5)
    assert execution.status == "error"  # as root the cgroup's shell starts, then cannot exec
    assert re.search("cannot start the bwrap sandbox|bwrap sandbox did not start", execution.detail)


def test_an_executor_error_is_this_machines_fault():
    assert fault_of(CodeExecutorError("the sandbox did not start")) == "setup"


class CodeArith(ArithBenchmark):
    runs_code = True


def test_a_runner_without_an_executor_refuses_code_tasks_before_generating():
    bench = CodeArith(BenchmarkContext())
    ids = [s.id for s in select_samples(bench, 2, "s")]
    task = protocol.Task.model_validate(
        {
            "id": 1,
            "epoch": 1,
            "round": 1,
            "model": {"id": 1, "ref": "bundled:mock-model"},
            "benchmark": {
                "name": bench.name,
                "version": bench.version,
                "prompt_version": bench.prompt_version,
                "dataset_sha256": bench.dataset_sha256,
                "config": dict(bench.config),
            },
            "n_samples": 2,
            "seed_commitment": hashlib.sha256(b"s").hexdigest(),
            "sample_ids": ids,
        }
    )
    refusing = TaskEvaluator(benchmark_loader=lambda name, context: CodeArith(context))
    with pytest.raises(RunnerSetupError, match="runs the model's code"):
        refusing.prepare(task)
    plain = CodeRunner(None)
    able = TaskEvaluator(benchmark_loader=lambda name, context: CodeArith(context), executor=plain)
    assert able.context.executor is plain
    assert [s.id for s in able.prepare(task).samples] == ids
