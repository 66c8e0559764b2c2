"""The OpenAI-compatible backend against a real third-party server: llama-cpp-python.

``python -m llama_cpp.server`` serves the bundled SmolLM2 GGUF with an API key it
checks (``llamacpp.py``), and the per-sample predictions are compared with our
in-process path on the same items (the GGUF dequantized to a transformers model,
``smollm2_backend``). llama.cpp computes with the quantized weights, so predictions
may differ: the agreement is printed, and only what must hold is asserted.

* Multiple choice by echoed log-probabilities: the path that never finished before
  (``max_tokens: 0`` means "no limit" to llama.cpp). llama-cpp-python 0.3 echoes them
  one position off for a model that adds no BOS token, as SmolLM2's GGUF says: run as
  a user would, the backend must notice and choose by letter; with the GGUF's
  ``add_bos_token`` overridden the echo is aligned and the log-probabilities are used.
* Generation (GSM8K, greedy) through ``/completions``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from pydantic import SecretStr

from quorumbench.backends import BackendOptions
from quorumbench.backends.openai_compat import OpenAICompatBackend
from quorumbench.benchmarks import load_benchmark
from quorumbench.errors import EndpointError
from quorumbench.evaluation.backend import ChoiceRequest
from quorumbench.evaluation.benchmark import BenchmarkContext
from quorumbench.evaluation.endpoints import pinned_transport
from quorumbench.evaluation.engine import EvalConfig, evaluate
from quorumbench.evaluation.refs import parse_ref

from .llamacpp import LLAMACPP_KEY, LlamaCppServer, require_llamacpp, serve_llamacpp

pytestmark = [pytest.mark.model]

MC_ITEMS = 3
GEN_ITEMS = 2
MAX_NATS_APART = 2.0
MC_CONFIG = EvalConfig(n=MC_ITEMS, seed="llamacpp", batch_size=4)
REQUEST_TIMEOUT_S = 120.0
"""Far above what one request takes: about a second for SmolLM2-135M on an idle
two-core machine, up to tens of seconds on a busy one (llama-cpp-python sorts the whole
vocabulary in Python for every echoed token). Requests go one at a time (the server
runs one at a time anyway), so the limit is what one request costs, not its wait."""


@pytest.fixture(scope="module")
def llamacpp_server(smollm2_gguf, tmp_path_factory) -> Iterator[LlamaCppServer]:
    """The server as a user starts it: the GGUF as it is."""
    require_llamacpp()
    with serve_llamacpp(smollm2_gguf, log_dir=tmp_path_factory.mktemp("llamacpp")) as server:
        yield server


@pytest.fixture(scope="module")
def llamacpp_bos_server(smollm2_gguf, tmp_path_factory) -> Iterator[LlamaCppServer]:
    """The server with ``add_bos_token`` overridden: aligned echoed log-probabilities."""
    require_llamacpp()
    folder = tmp_path_factory.mktemp("llamacpp-bos")
    with serve_llamacpp(smollm2_gguf, add_bos=True, log_dir=folder) as server:
        yield server


MC_BENCHMARK = "gen-reasoning"
"""Multiple choice with short prompts: llama-cpp-python's server sorts the whole vocabulary
in Python for every echoed token, so a request costs in proportion to its prompt.
TruthfulQA-MC1's six-question primer made these two tests 140 s on a busy two-core
machine (13 times the echoed text of gen-reasoning's items; 22 s now, alone); what they check,
the echo's alignment and the agreement per option, does not depend on the prompt's
length."""


@pytest.fixture(scope="module")
def mc_bench():
    return load_benchmark(MC_BENCHMARK, BenchmarkContext())


@pytest.fixture(scope="module")
def mc_local(mc_bench, smollm2_backend):
    return evaluate(mc_bench, smollm2_backend, MC_CONFIG)


def report(capsys: pytest.CaptureFixture[str], lines: list[str]) -> None:
    """Show the figures in the test log even when output is captured."""
    with capsys.disabled():
        sys.stdout.write("\n" + "\n".join(lines) + "\n")


def backend_for(server: LlamaCppServer, key: str | None = LLAMACPP_KEY) -> OpenAICompatBackend:
    options = BackendOptions(
        api_key=SecretStr(key) if key else None,
        timeout_s=REQUEST_TIMEOUT_S,
        max_retries=0,  # a timeout must fail the test, not hide behind retries
        max_concurrency=1,
    )
    # The server is on loopback, so private addresses are allowed; the connection still
    # goes through the pinned transport, as a user's endpoint does.
    return OpenAICompatBackend(
        parse_ref(server.ref), options, transport=pinned_transport(allow_private=True)
    )


def agreement(ours, theirs) -> tuple[int, int]:
    pairs = list(zip(ours.samples, theirs.samples, strict=True))
    assert [a.id for a, _ in pairs] == [b.id for _, b in pairs]
    return sum(a.prediction == b.prediction for a, b in pairs), len(pairs)


def test_the_server_checks_the_key(llamacpp_server):
    models = f"{llamacpp_server.base_url}/models"
    assert httpx.get(models, timeout=10).status_code == 401
    wrong = "sk-wrong-SECRET-123"
    request = ChoiceRequest("Q: What is 2+2?\nA:", (" 4", " 5"), "2+2?", ("4", "5"), (0, 1))
    with pytest.raises(EndpointError) as caught:
        backend_for(llamacpp_server, key=wrong).choose([request], batch_size=1)
    assert caught.value.status == 401
    assert "SECRET" not in caught.value.message


def run_mc(server: LlamaCppServer, bench) -> tuple[OpenAICompatBackend, object, float]:
    backend = backend_for(server)
    started = time.perf_counter()
    result = evaluate(bench, backend, MC_CONFIG)
    return backend, result, time.perf_counter() - started


def mc_lines(name: str, remote, local, elapsed: float) -> list[str]:
    same, total = agreement(remote, local)
    lines = [
        f"RESULT llamacpp {name} {MC_BENCHMARK} items={total} agree={same}/{total} "
        f"acc_llamacpp={remote.aggregate.mean:.3f} "
        f"acc_inprocess={local.aggregate.mean:.3f} wall_s={elapsed:.1f}"
    ]
    lines += [
        f"  {ours.id}: llamacpp={ours.prediction} inprocess={theirs.prediction} "
        f"llamacpp_output={ours.output[:80]!r} inprocess_output={theirs.output[:80]!r}"
        for ours, theirs in zip(remote.samples, local.samples, strict=True)
    ]
    return lines


def test_mc_as_a_user_runs_it_falls_back_to_letters(llamacpp_server, mc_bench, mc_local, capsys):
    backend, remote, elapsed = run_mc(llamacpp_server, mc_bench)
    report(capsys, mc_lines("as-is/letters", remote, mc_local, elapsed))
    # The misaligned echo was noticed: every item went by letter, none by wrong numbers.
    assert backend.uses_letters
    assert len(remote.samples) == MC_ITEMS and all(s.output for s in remote.samples)


def test_mc_by_logprobs_agrees_with_the_in_process_path(
    llamacpp_bos_server, mc_bench, mc_local, capsys
):
    backend, remote, elapsed = run_mc(llamacpp_bos_server, mc_bench)
    report(capsys, mc_lines("bos/logprobs", remote, mc_local, elapsed))
    assert not backend.uses_letters, "llama.cpp's echoed log-probabilities were not used"
    assert all(s.prediction is not None for s in remote.samples)
    # Quantized kernels and the BOS token move each option's sum by about a nat at most
    # (measured: 0.49 on TruthfulQA-MC1 items, 1.19 on these shorter ones, where the
    # extra BOS token weighs more); misaligned log-probabilities move it by several.
    for ours, theirs in zip(remote.samples, mc_local.samples, strict=True):
        mine = json.loads(ours.output)["loglikelihoods"]
        local = json.loads(theirs.output)["loglikelihoods"]
        assert max(abs(a - b) for a, b in zip(mine, local, strict=True)) < MAX_NATS_APART


def test_generation_agrees_with_the_in_process_path(
    llamacpp_server, smollm2_backend, datasets_dir, capsys
):
    bench = load_benchmark("gsm8k", BenchmarkContext(datasets_dir, shots=2, max_new_tokens=32))
    config = EvalConfig(n=GEN_ITEMS, seed="llamacpp", batch_size=4, prompt_style="plain")
    started = time.perf_counter()
    remote = evaluate(bench, backend_for(llamacpp_server), config)
    elapsed = time.perf_counter() - started
    local = evaluate(bench, smollm2_backend, config)

    assert all(s.output.strip() for s in remote.samples), "llama.cpp generated nothing"
    same, total = agreement(remote, local)
    same_text = sum(
        a.output == b.output for a, b in zip(remote.samples, local.samples, strict=True)
    )
    lines = [
        f"RESULT llamacpp gsm8k items={total} agree={same}/{total} "
        f"same_text={same_text}/{total} wall_s={elapsed:.1f}"
    ]
    for ours, theirs in zip(remote.samples, local.samples, strict=True):
        lines += [
            f"  {ours.id}: llamacpp={ours.output[:70]!r}",
            f"  {'':{len(ours.id)}}  inprocess={theirs.output[:70]!r}",
        ]
    report(capsys, lines)
