"""Backend plugins installed for real: a package and its ``*.dist-info`` (METADATA,
``entry_points.txt``) written into a directory put on ``sys.path``, found through the
``quorumbench.backends`` entry-point group like any installed distribution.

The process's registry is rebuilt before and after each test (``plugin_site``), so no
test sees another's plugins whatever the order.
"""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

import pytest
from typer.testing import CliRunner

from quorumbench.backends import (
    BackendOptions,
    BackendPlugin,
    BackendRegistry,
    is_remote,
    load_backend,
    rebuild_registry,
    registry,
)
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.cli.app import app
from quorumbench.errors import ConfigError, UnknownBackendError
from quorumbench.evaluation import registry as generic_registry
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate, select_samples
from quorumbench.runner.evaluator import TaskEvaluator
from quorumbench.runner.faults import RunnerSetupError
from quorumbench.runner.sandbox import Limits, Sandbox

SHA = "0123456789abcdef0123456789abcdef01234567"

PARROT = '''
"""Answers every question with the number its ref names: parrot:<number>@<revision>."""

from quorumbench.backends import BackendPlugin
from quorumbench.evaluation.backend import ChoiceResult, GenerateResult, ModelInfo


class ParrotBackend:
    def __init__(self, ref, options):
        self.answer = f"#### {ref.location}"
        self._info = ModelInfo(ref.canonical(), "parrot", ref.revision, is_chat=False)
        self.closed = False

    @property
    def info(self):
        return self._info

    def generate(self, requests, *, batch_size, progress=lambda n: None):
        out = [GenerateResult(self.answer, 2, "eos") for _ in requests]
        progress(len(out))
        return out

    def choose(self, requests, *, batch_size, progress=lambda n: None):
        out = [ChoiceResult("loglikelihood", (0.0,) * len(r.continuations)) for r in requests]
        progress(len(out))
        return out

    def count_tokens(self, text):
        return len(text.split())

    def close(self):
        self.closed = True


BACKEND = BackendPlugin(schemes=("parrot",), load=ParrotBackend)
REMOTE = BackendPlugin(schemes=("far",), load=ParrotBackend, remote=True)
'''


@dataclass
class Site:
    """A directory on ``sys.path`` to install distributions into."""

    path: Path
    modules: list[str]

    def install(
        self,
        dist: str,
        modules: dict[str, str],
        entry_points: dict[str, str],
        version="1.0",
        group="quorumbench.backends",
    ) -> None:
        for name, source in modules.items():
            (self.path / f"{name}.py").write_text(dedent(source))
            self.modules.append(name)
        info = self.path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = [f"{name} = {target}" for name, target in entry_points.items()]
        (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
        importlib.invalidate_caches()


@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", [])
    site.path.mkdir()
    monkeypatch.syspath_prepend(str(site.path))
    rebuild_registry()
    yield site
    for name in site.modules:
        sys.modules.pop(name, None)
    rebuild_registry()  # read again on next use, with this site off sys.path


@pytest.fixture
def parrot(plugin_site):
    plugin_site.install(
        "qb-parrot",
        {"qb_parrot": PARROT},
        {"parrot": "qb_parrot:BACKEND", "far": "qb_parrot:REMOTE"},
    )
    return plugin_site


def plugins_list() -> str:
    result = CliRunner().invoke(app, ["plugins", "list"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


def row(output: str, name: str) -> str:
    (line,) = [line for line in output.splitlines() if f"│ {name} " in line]
    return " ".join(line.split())


def test_a_plugin_owns_its_scheme_and_evaluates_a_benchmark(parrot):
    arith = ArithBenchmark(BenchmarkContext())
    (sample,) = select_samples(arith, 1, "plugin")
    gold = sample.fields["gold"]
    backend = load_backend(f"parrot:{gold}@{SHA}", BackendOptions())
    result = evaluate(arith, backend, EvalConfig(n=1, seed="plugin"))
    assert result.score == 1.0 and result.samples[0].output == f"#### {gold}"
    assert result.model["ref"] == f"parrot:{gold}@{SHA}"
    assert result.model["revision"] == SHA
    wrong = load_backend(f"parrot:{int(gold) + 1}@{SHA}", BackendOptions())
    assert evaluate(arith, wrong, EvalConfig(n=1, seed="plugin")).score == 0.0
    assert registry().owner("parrot")[0] == "parrot"
    assert not is_remote(f"parrot:1@{SHA}") and is_remote(f"far:1@{SHA}")


def test_quorumbench_eval_takes_a_plugin_ref(parrot):
    (sample,) = select_samples(ArithBenchmark(BenchmarkContext()), 1, "cli")
    ref = f"parrot:{sample.fields['gold']}@{SHA}"
    args = ["eval", "-m", ref, "-b", "arith", "-n", "1", "--seed", "cli"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"│ {ref} " in result.output and "1.0000" in result.output


def test_plugins_list_shows_each_backend_with_its_schemes_and_origin(parrot):
    listed = plugins_list()
    assert row(listed, "parrot").startswith(
        "│ backend │ parrot │ parrot: │ qb_parrot:BACKEND │ plugin qb-parrot 1.0 │ ok │"
    )
    assert "│ far: (remote) │" in row(listed, "far")
    assert "│ gguf: , bundled: │" in row(listed, "gguf").replace(",", " ,")
    assert "│ openai: (remote) │ quorumbench.backends._builtins:OPENAI_COMPAT │ builtin │ ok" in (
        row(listed, "openai-compat")
    )


def test_a_broken_plugin_stays_listed_with_its_error(plugin_site):
    plugin_site.install(
        "qb-broken",
        {
            "qb_broken": "import vllm_that_is_not_installed\n",
            "qb_bare": "def load(ref, options):\n    raise AssertionError('never called')\n",
        },
        {"broken": "qb_broken:BACKEND", "bare": "qb_bare:load"},
    )
    listed = plugins_list()
    assert (
        "│ plugin qb-broken 1.0 │ error: ModuleNotFoundError: No module named "
        "'vllm_that_is_not_installed' │"
    ) in row(listed, "broken")
    assert "error: qb_bare:load is a function, not a BackendPlugin" in row(listed, "bare")
    # a ref no backend loads names the plugin that failed: it may be the one meant
    with pytest.raises(UnknownBackendError, match="no backend loads vllm: refs") as info:
        load_backend(f"vllm:org/model@{SHA}", BackendOptions())
    assert "plugins not in use: broken (ModuleNotFoundError" in info.value.message
    with pytest.raises(ConfigError, match="the backend 'bare' is not used: qb_bare:load is a"):
        registry().get("bare")
    # the built-ins work as before
    assert load_backend(f"mock:say/7@{SHA}", BackendOptions()).info.backend == "mock"


def test_scheme_and_name_collisions_are_shown_never_shadowing(plugin_site):
    claims = PARROT.replace('("parrot",)', '("hf", "own")').replace('("far",)', '("twin", "twin")')
    plugin_site.install("qb-greedy", {"qb_greedy": claims}, {"greedy": "qb_greedy:BACKEND"})
    plugin_site.install("qb-twin-a", {"qb_twin": claims}, {"twin-a": "qb_twin:REMOTE"})
    plugin_site.install("qb-twin-b", {}, {"twin-b": "qb_twin:REMOTE", "mock": "qb_twin:REMOTE"})
    plugin_site.install("qb-dup-1", {}, {"dup": "qb_twin:REMOTE"})
    plugin_site.install("qb-dup-2", {}, {"dup": "qb_twin:REMOTE"})
    listed = plugins_list()
    assert "error: it claims hf:, which the built-in backend 'hf' owns" in row(listed, "greedy")
    conflict = "the scheme twin: is claimed by 'twin-a' and 'twin-b'; none of them is used"
    assert conflict in row(listed, "twin-a") and conflict in row(listed, "twin-b")
    (builtin, plugin) = [" ".join(r.split()) for r in listed.splitlines() if "│ mock " in r]
    assert "│ builtin │ ok │" in builtin
    assert "error: 'mock' is the name of a built-in backend; this entry point is not used" in (
        plugin
    )
    dups = [" ".join(r.split()) for r in listed.splitlines() if "│ dup " in r]
    assert len(dups) == 2 and all("2 plugins register the backend 'dup'" in r for r in dups)
    # what the table says is what lookups do
    assert registry().owner("hf")[0] == "hf"  # the built-in keeps its scheme
    with pytest.raises(ConfigError, match="no backend loads own: refs: the plugin 'greedy'"):
        load_backend(f"own:x@{SHA}", BackendOptions())
    with pytest.raises(ConfigError, match=conflict):
        load_backend(f"twin:x@{SHA}", BackendOptions())
    with pytest.raises(ConfigError, match="2 plugins register the backend 'dup'"):
        registry().get("dup")
    assert registry().get("mock").schemes == ("mock",)


def test_the_registry_is_built_once_and_rebuilt_on_request(parrot, monkeypatch):
    reads = []
    real = generic_registry.entry_points

    def counting(**kwargs):
        reads.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(generic_registry, "entry_points", counting)
    rebuild_registry()
    for _ in range(3):
        load_backend(f"parrot:1@{SHA}", BackendOptions())
        load_backend(f"mock:empty@{SHA}", BackendOptions())
    assert reads == [{"group": "quorumbench.backends"}]
    found = []
    threads = [threading.Thread(target=lambda: found.append(registry())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r is found[0] for r in found) and found[0] is registry()
    rebuild_registry()
    assert registry() is not found[0]
    load_backend(f"parrot:1@{SHA}", BackendOptions())
    assert len(reads) == 2


def test_a_registry_of_ones_own_is_used_instead_of_the_process_one(parrot, monkeypatch):
    module = type(sys)("qb_own_backends")
    module.MINE = BackendPlugin(schemes=("parrot",), load=lambda ref, options: MockBackend())
    monkeypatch.setitem(sys.modules, "qb_own_backends", module)
    own = BackendRegistry({"mine": "qb_own_backends:MINE"}, group="qb.none")
    assert own.names() == ["mine"] and own.owner("parrot")[0] == "mine"
    assert isinstance(load_backend(f"parrot:1@{SHA}", BackendOptions(), own), MockBackend)
    assert registry().owner("parrot")[0] == "parrot"


def test_a_sandboxed_runner_refuses_a_plugin_that_runs_model_code_here(parrot):
    sandbox = Sandbox("bwrap", "/usr/bin/bwrap", Limits(memory_mb=None, processes=64))
    evaluator = TaskEvaluator(sandbox=sandbox)
    with pytest.raises(RunnerSetupError, match="this runner's sandbox loads only hf:, gguf:"):
        evaluator.backend(f"parrot:1@{SHA}")
    with pytest.raises(RunnerSetupError):
        evaluator.backend(f"mock:empty@{SHA}")
    remote = evaluator.backend(f"far:1@{SHA}")  # an endpoint: called from this process
    assert remote.info.backend == "parrot"
    unsandboxed = TaskEvaluator().backend(f"parrot:1@{SHA}")
    assert unsandboxed.info.ref == f"parrot:1@{SHA}"


def test_benchmark_plugins_are_read_once_per_process_and_again_on_rebuild(plugin_site):
    from quorumbench import benchmarks

    benchmarks.rebuild_registry()
    first = benchmarks.registry()
    assert first is benchmarks.registry(), "one registry per process, not one per lookup"
    assert "arith" in first  # its entry points are read now, on first use
    plugin_site.install(
        "qb-sums",
        {"qb_sums": "from quorumbench.benchmarks.arith import ArithBenchmark as SUMS\n"},
        {"sums": "qb_sums:SUMS"},
        group="quorumbench.benchmarks",
    )
    assert "sums" not in benchmarks.registry(), "entry points are not read on every lookup"
    rebuilt = benchmarks.rebuild_registry()
    assert rebuilt is benchmarks.registry() and "sums" in rebuilt
    loaded = benchmarks.load_benchmark("sums", BenchmarkContext())
    assert isinstance(loaded, ArithBenchmark)
    benchmarks.rebuild_registry()
