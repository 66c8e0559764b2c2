"""What the runner evaluates a task with: the task's benchmark, checked, and its model.

:class:`TaskEvaluator` loads (and caches) benchmarks and models, checks a task
against this runner's benchmark (:meth:`TaskEvaluator.prepare`: version, data, prompt
options, sample ids) and evaluates exactly the task's samples. A benchmark that is not
the task's is a :class:`~quorumbench.runner.faults.RunnerSetupError`: this runner's
setup, not the task, is at fault.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quorumbench.backends import (
    BackendOptions,
    _llama_lib,
    available_engines,
    is_remote,
    load_backend,
)
from quorumbench.backends.local import sandboxable
from quorumbench.benchmarks import load_benchmark
from quorumbench.benchmarks.custom import benchmark_from_spec, default_data_cache
from quorumbench.errors import DataError
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext, Sample
from quorumbench.evaluation.endpoints import check_endpoint
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.execution import CodeExecutor, runs_code
from quorumbench.evaluation.refs import parse_ref
from quorumbench.evaluation.remote_data import FetchPolicy
from quorumbench.evaluation.results import RunResult
from quorumbench.evaluation.spec import parse_spec
from quorumbench.protocol import Engine, Task, TaskBenchmark
from quorumbench.runner.faults import RunnerSetupError, datasets_hint
from quorumbench.runner.sandbox import Sandbox
from quorumbench.runner.worker import load_sandboxed

BackendLoader = Callable[[str, BackendOptions], ModelBackend]
BenchmarkLoader = Callable[[str, BenchmarkContext], Benchmark]


def _load_backend(ref: str, options: BackendOptions) -> ModelBackend:
    return load_backend(ref, options)


def _load_benchmark(name: str, context: BenchmarkContext) -> Benchmark:
    return load_benchmark(name, context)


def _no_watch() -> None:
    pass


def _normalized(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class Prepared:
    """A task checked against this runner's benchmark, ready to evaluate."""

    benchmark: Benchmark
    config: EvalConfig
    model_ref: str
    samples: tuple[Sample, ...]
    """The task's samples, derived and checked against its sample ids."""


class TaskEvaluator:
    """Loads (and caches) benchmarks and models; evaluates exactly a task's samples.

    With a ``sandbox``, a model that runs code on this machine (``hf:``, ``gguf:``,
    ``bundled:``) is fetched here and loaded in a sandboxed worker, one per cached
    model (``runner/worker.py``); remote endpoints (``openai:``, a plugin backend
    declared remote) run in this process. Any other backend (``mock:``, a plugin's)
    would run model code here, which the sandbox cannot host: that is refused as a
    :class:`RunnerSetupError`. Without a sandbox every model loads in this process, as
    do the test loaders' models. An ``openai:`` endpoint on a loopback, private or
    link-local address is refused (``EndpointNotAllowedError``, the model's fault)
    unless ``allow_private_endpoints``.

    Code benchmarks (HumanEval, MBPP) run each generated program with ``executor``
    (``runner/code_exec.py``: a fresh sandbox per program); without one their tasks
    are refused before anything is generated (a :class:`RunnerSetupError`).

    A task of a benchmark created through the API carries its spec: the data is
    fetched by the spec's URL (public addresses only unless ``allow_private_data_urls``,
    size-limited), checked against the task's SHA-256 and cached in ``data_cache_dir``.
    """

    def __init__(
        self,
        *,
        datasets_dir: Path | None = None,
        options: BackendOptions | None = None,
        batch_size: int = 8,
        max_models: int = 1,
        backend_loader: BackendLoader = _load_backend,
        benchmark_loader: BenchmarkLoader = _load_benchmark,
        sandbox: Sandbox | None = None,
        allow_private_endpoints: bool = False,
        executor: CodeExecutor | None = None,
        allow_private_data_urls: bool = False,
        data_cache_dir: Path | None = None,
        fetch_policy: FetchPolicy | None = None,
        carbon_intensity: str | None = None,
        engines: tuple[Engine, ...] | None = None,
    ) -> None:
        self.context = BenchmarkContext(datasets_dir, executor=executor)
        self.fetch_policy = fetch_policy or FetchPolicy(allow_private=allow_private_data_urls)
        self.data_cache_dir = data_cache_dir or default_data_cache()
        self.allow_private_endpoints = allow_private_endpoints
        self.options = options or BackendOptions()
        self.batch_size = batch_size
        self.carbon_intensity = carbon_intensity
        self.max_models = max(1, max_models)
        self._load_backend = backend_loader
        self._load_benchmark = benchmark_loader
        self.sandbox = sandbox
        self.engines = available_engines() if engines is None else engines
        self._backends: OrderedDict[str, ModelBackend] = OrderedDict()
        """Loaded models by ref (``ref#engine`` when the task named one)."""
        self._benchmarks: dict[str, Benchmark] = {}

    def benchmark(self, name: str) -> Benchmark:
        if name not in self._benchmarks:
            self._benchmarks[name] = self._load_benchmark(name, self.context)
        return self._benchmarks[name]

    def task_benchmark(self, wanted: TaskBenchmark) -> Benchmark:
        """The task's benchmark: by name, or (created through the API) from the spec the
        task carries, its data fetched and checked (kept per name, version and data)."""
        if wanted.spec_json is None:
            return self.benchmark(wanted.name)
        key = f"{wanted.name}@{wanted.version}#{wanted.dataset_sha256}"
        if key not in self._benchmarks:
            try:
                raw = json.loads(wanted.spec_json)
            except json.JSONDecodeError as exc:
                raise DataError(f"the task's spec of {wanted.name} is not JSON: {exc}") from exc
            spec = parse_spec(raw, f"the task's spec of {wanted.name}")
            if spec.data.sha256 != wanted.dataset_sha256 or spec.name != wanted.name:
                raise DataError(
                    f"the task's spec of {wanted.name} names other data "
                    f"({spec.name}, {spec.data.sha256}) than the task ({wanted.dataset_sha256})"
                )
            self._benchmarks[key] = benchmark_from_spec(
                spec, self.context, policy=self.fetch_policy, cache_dir=self.data_cache_dir
            )
        return self._benchmarks[key]

    def backend(
        self, ref: str, watch: Callable[[], None] = _no_watch, engine: Engine | None = None
    ) -> ModelBackend:
        """The model behind ``ref``, loaded once and kept (least recently used goes).

        ``watch`` is called while a sandboxed model loads; what it raises stops the
        load (and kills the sandbox). A sandboxed model whose worker died is loaded
        again. ``engine`` is the task's (protocol 1.3): a GGUF file runs on llama.cpp or
        de-quantized on transformers as it says; None leaves the runner's own choice. An
        engine this runner does not have is a :class:`RunnerSetupError` (the task is
        given back without a failure).
        """
        options = self._options_for(ref, engine)
        key = ref if engine is None else f"{ref}#{engine}"
        if ref.startswith("openai:"):  # evaluated outside the sandbox, with this network
            check_endpoint(parse_ref(ref).location, allow_private=self.allow_private_endpoints)
        if self.sandbox is not None and not sandboxable(ref) and not is_remote(ref):
            raise RunnerSetupError(
                f"{ref} is loaded by a backend that runs model code on this machine, and "
                "this runner's sandbox loads only hf:, gguf: and bundled: models; it cannot "
                "evaluate this model"
            )
        if key in self._backends:
            if getattr(self._backends[key], "alive", True):
                self._backends.move_to_end(key)
                return self._backends[key]
            self._drop(key)
        while len(self._backends) >= self.max_models:
            self._drop(next(iter(self._backends)))
        if self.sandbox is not None and sandboxable(ref):
            backend: ModelBackend = load_sandboxed(ref, options, self.sandbox, watch)
        else:
            backend = self._load_backend(ref, options)
        self._backends[key] = backend
        return backend

    def _options_for(self, ref: str, engine: Engine | None) -> BackendOptions:
        if engine is None:
            return self.options
        if engine not in self.engines:
            hint = {
                "llamacpp": f" ({_llama_lib.INSTALL})",
                "transformers": " (pip install 'quorumbench[hf]')",
            }
            raise RunnerSetupError(
                f"{ref} is evaluated by the {engine} engine, which this runner does not "
                f"have{hint.get(engine, '')}; the task goes back to other runners"
            )
        if engine in ("transformers", "llamacpp"):
            return replace(self.options, engine=engine)
        return self.options

    def evict(self, ref: str) -> None:
        """Close ``ref``'s model, whatever engine it was loaded with."""
        for key in [k for k in self._backends if k == ref or k.startswith(f"{ref}#")]:
            self._drop(key)

    def _drop(self, key: str) -> None:
        backend = self._backends.pop(key, None)
        if backend is not None:
            backend.close()

    def prepare(self, task: Task) -> Prepared:
        """Check the task against the local benchmark; raise a QuorumError if it differs
        (a :class:`RunnerSetupError` when this runner's benchmark is not the task's)."""
        spec = task.benchmark
        name, version, n = spec.name, spec.version, task.n_samples
        wanted = task.sample_ids
        bench = self.task_benchmark(spec)
        if runs_code(bench) and self.context.executor is None:
            raise RunnerSetupError(
                f"{name} runs the model's code, and this runner has no executor for it"
            )
        wanted_version = (version, spec.prompt_version)
        if (bench.version, bench.prompt_version) != wanted_version:
            fix = (
                "this runner's quorumbench is out of date, upgrade it"
                if wanted_version > (bench.version, bench.prompt_version)
                else "this runner's quorumbench is newer than the server's; run the server's"
            )
            raise RunnerSetupError(
                f"the task needs {name} v{version} (prompt v{spec.prompt_version}); this "
                f"runner has v{bench.version} (prompt v{bench.prompt_version}): {fix}"
            )
        if bench.dataset_sha256 != spec.dataset_sha256:
            raise RunnerSetupError(
                f"data mismatch for {name}: the task's data has SHA-256 {spec.dataset_sha256}, "
                f"this runner's has {bench.dataset_sha256}; upgrade quorumbench if it is out "
                f"of date, else {datasets_hint(self.context.datasets_dir)}"
            )
        if _normalized(dict(bench.config)) != _normalized(spec.config):
            raise RunnerSetupError(
                f"{name} prompt options differ: the task has {spec.config}, this runner "
                f"{dict(bench.config)}: its quorumbench differs from the server's (upgrade it)"
            )
        if len(wanted) != n or len(set(wanted)) != n:
            raise DataError(f"the task asks for {n} samples but lists {len(set(wanted))} ids")
        # The epoch's seed is secret until the epoch is over, so the ids cannot be
        # re-derived here; `quorumbench verify` checks them against the revealed seed.
        samples = bench.samples(wanted)  # a DataError for an id the benchmark lacks
        config = EvalConfig(
            n=n,
            seed=task.seed_commitment,
            batch_size=self.batch_size,
            carbon_intensity=self.carbon_intensity,
        )
        return Prepared(bench, config, task.model.ref, tuple(samples))

    def run(
        self, prepared: Prepared, backend: ModelBackend, progress: Callable[[int], None]
    ) -> RunResult:
        return evaluate(
            prepared.benchmark, backend, prepared.config, progress, samples=prepared.samples
        )

    def close(self) -> None:
        for ref in list(self._backends):
            self.evict(ref)
