"""The mock backend is a registered backend like the others: ``mock:`` refs."""

import pytest

from quorumbench.backends import BackendOptions, is_remote, load_backend, registry
from quorumbench.backends.local import sandboxable
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import ArithBenchmark
from quorumbench.errors import InvalidRefError
from quorumbench.evaluation.backend import GenerateRequest, Prompt
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.engine import EvalConfig, evaluate, select_samples
from quorumbench.evaluation.refs import BUILTIN_SCHEMES

REV = "ab" * 32


def ask(backend, text):
    (result,) = backend.generate([GenerateRequest(Prompt(text=text))], batch_size=1)
    return result.text


def test_mock_refs_load_their_scripts():
    empty = load_backend(f"mock:empty@{REV}", BackendOptions())
    assert isinstance(empty, MockBackend) and ask(empty, "2+2?") == ""
    assert ask(load_backend(f"mock:echo@{REV}", BackendOptions()), "2+2?") == "2+2?"
    said = load_backend(f"mock:say/%23%23%23%23%204@{REV}", BackendOptions())
    assert ask(said, "2+2?") == "#### 4"
    assert said.info.ref == f"mock:say/%23%23%23%23%204@{REV}"
    assert (said.info.backend, said.info.revision) == ("mock", REV)


def test_a_mock_ref_evaluates_a_benchmark_through_the_engine():
    arith = ArithBenchmark(BenchmarkContext())
    (sample,) = select_samples(arith, 1, "mock")
    backend = load_backend(
        f"mock:say/%23%23%23%23%20{sample.fields['gold']}@{REV}", BackendOptions()
    )
    assert evaluate(arith, backend, EvalConfig(n=1, seed="mock")).score == 1.0


def test_an_unknown_mock_script_or_an_unpinned_mock_ref_is_refused():
    with pytest.raises(
        InvalidRefError, match="unknown mock script 'guess' in mock:guess@.*; known: empty, echo"
    ):
        load_backend(f"mock:guess@{REV}", BackendOptions())
    with pytest.raises(InvalidRefError, match="pinned"):
        load_backend("mock:empty", BackendOptions())


def test_the_mock_is_local_and_not_loaded_from_files():
    assert not is_remote(f"mock:empty@{REV}") and not sandboxable(f"mock:empty@{REV}")


def test_every_builtin_scheme_has_its_builtin_backend():
    owners = {scheme: registry().owner(scheme)[0] for scheme in (*BUILTIN_SCHEMES, "mock")}
    assert owners == {
        "hf": "hf",
        "gguf": "gguf",
        "bundled": "gguf",
        "openai": "openai-compat",
        "mock": "mock",
    }
    assert [s.error for s in registry().status()] == [None] * len(registry().names())
