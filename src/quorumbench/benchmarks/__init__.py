"""Built-in benchmarks, registered by name and imported on first use.

Each entry maps a name to a factory ``(BenchmarkContext) -> Benchmark``. A path to
a ``.yaml``/``.yml``/``.json`` file is loaded as a custom benchmark spec instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from quorumbench.errors import UnknownBenchmarkError
from quorumbench.evaluation.benchmark import Benchmark, BenchmarkContext
from quorumbench.evaluation.registry import Registry

BenchmarkFactory = Callable[[BenchmarkContext], Benchmark]

_BUILTINS = {
    "arith": "quorumbench.benchmarks.arith:ArithBenchmark",
    "gen-language": "quorumbench.benchmarks.gen_language:GenLanguageBenchmark",
    "gen-reasoning": "quorumbench.benchmarks.gen_reasoning:GenReasoningBenchmark",
    "gen-safety": "quorumbench.benchmarks.gen_safety:GenSafetyBenchmark",
    "gsm8k": "quorumbench.benchmarks.gsm8k:Gsm8kBenchmark",
    "humaneval": "quorumbench.benchmarks.humaneval:HumanEvalBenchmark",
    "mbpp": "quorumbench.benchmarks.mbpp:MbppBenchmark",
    "truthfulqa-mc1": "quorumbench.benchmarks.truthfulqa:TruthfulQAMC1",
    "truthfulqa-mc2": "quorumbench.benchmarks.truthfulqa:TruthfulQAMC2",
    "arc-challenge": "quorumbench.benchmarks.arc:ArcChallengeBenchmark",
    "hellaswag": "quorumbench.benchmarks.hellaswag:HellaSwagBenchmark",
    "mmlu": "quorumbench.benchmarks.mmlu:MmluBenchmark",
    "boolq": "quorumbench.benchmarks.boolq:BoolQBenchmark",
    "piqa": "quorumbench.benchmarks.piqa:PiqaBenchmark",
    "winogrande": "quorumbench.benchmarks.winogrande:WinograndeBenchmark",
    "bbq": "quorumbench.benchmarks.bbq:BbqBenchmark",
}

DEFAULT_PILLARS = {
    "arith": "math",
    "gen-language": "language",
    "gen-reasoning": "reasoning",
    "gen-safety": "safety",
    "gsm8k": "math",
    "humaneval": "coding",
    "mbpp": "coding",
    "truthfulqa-mc1": "reasoning",
    "truthfulqa-mc2": "reasoning",
    "arc-challenge": "reasoning",
    "hellaswag": "reasoning",
    "mmlu": "reasoning",
    "boolq": "language",
    "piqa": "language",
    "winogrande": "language",
    "bbq": "safety",
}
"""Each built-in benchmark's pillar (seed 002's assignment); the server's ``pillars``
setting overrides it, and a custom spec names its own."""


def _not_found(name: str, known: list[str]) -> Exception:
    return UnknownBenchmarkError(
        f"unknown benchmark {name!r}; known: {', '.join(known)} "
        "(or give the path of a custom benchmark spec, .yaml or .json)"
    )


class _Current:
    """The process's registry, made on first use (a lock: one even under threads)."""

    lock = threading.Lock()
    registry: Registry[BenchmarkFactory] | None = None


def registry() -> Registry[BenchmarkFactory]:
    """This process's benchmark registry: built-ins and plugins, read once and kept."""
    with _Current.lock:
        if _Current.registry is None:
            _Current.registry = _new_registry()
        return _Current.registry


def _new_registry() -> Registry[BenchmarkFactory]:
    return Registry("benchmark", _BUILTINS, "quorumbench.benchmarks", _not_found)


def rebuild_registry() -> Registry[BenchmarkFactory]:
    """A new registry for this process, reading the entry points again; returned."""
    with _Current.lock:
        _Current.registry = _new_registry()
        return _Current.registry


def load_benchmark(
    name_or_path: str,
    context: BenchmarkContext,
    benchmarks: Registry[BenchmarkFactory] | None = None,
) -> Benchmark:
    """A registered benchmark by name, or a custom spec by file path."""
    if name_or_path.endswith((".yaml", ".yml", ".json")):
        from quorumbench.benchmarks.custom import load_custom_benchmark

        return load_custom_benchmark(Path(name_or_path), context)
    factory = (benchmarks or registry()).get(name_or_path)
    return factory(context)
