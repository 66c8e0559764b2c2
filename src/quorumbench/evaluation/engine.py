"""The engine: a benchmark and a backend in, a scored, hashed run out."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from quorumbench.core.canonical import canonical_json, outputs_digest, sha256_hex
from quorumbench.core.sampling import SAMPLING_SCHEME, sample_ids
from quorumbench.core.scoring import aggregate
from quorumbench.errors import ConfigError, Hint
from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ModelBackend,
    Progress,
    no_progress,
)
from quorumbench.evaluation.benchmark import Benchmark, PromptStyle, Sample
from quorumbench.evaluation.environment import hardware, library_versions
from quorumbench.evaluation.measure import Measurer
from quorumbench.evaluation.predictions import canonical_prediction, predictions_digest
from quorumbench.evaluation.results import RunResult, SampleResult, label_slices
from quorumbench.protocol import Measurements

LOGLIKELIHOOD_DECIMALS = 4
"""Log-likelihoods are rounded to this many decimals before scoring and hashing, so
the recorded output alone reproduces the score and tiny float noise between batch
shapes does not change the hash."""


@dataclass(frozen=True)
class EvalConfig:
    """How to run: how many samples, which seed, batch size and prompt style; whether
    to measure the run (energy, latency, memory: evaluation/measure.py) and the carbon
    intensity its CO₂ is computed with (a country code or g CO₂/kWh; None: the world
    average)."""

    n: int = 10
    seed: str = "0"
    batch_size: int = 8
    prompt_style: Literal["auto", "chat", "plain"] = "auto"
    measure: bool = True
    carbon_intensity: str | None = None


def resolve_style(config: EvalConfig, backend: ModelBackend) -> PromptStyle:
    if config.prompt_style == "auto":
        return "chat" if backend.info.is_chat else "plain"
    if config.prompt_style == "chat" and not backend.info.is_chat:
        raise ConfigError(
            f"{backend.info.ref} has no chat template",
            hint=Hint("prompt_style", "use the plain prompt style"),
        )
    return config.prompt_style


def request_digest(request: GenerateRequest | ChoiceRequest) -> str:
    """SHA-256 of the canonical JSON of a request: what the model was asked."""
    if isinstance(request, GenerateRequest):
        prompt = request.prompt
        body: dict[str, object] = {
            "text": prompt.text,
            "messages": [[m.role, m.content] for m in prompt.messages or ()],
            "stop": list(request.stop),
            "max_new_tokens": request.max_new_tokens,
        }
    else:
        body = {"context": request.context, "continuations": list(request.continuations)}
    return sha256_hex(canonical_json(body))


def output_text(result: GenerateResult | ChoiceResult) -> str:
    """The raw output recorded for a sample (generated text, or the option scores)."""
    if isinstance(result, GenerateResult):
        return result.text
    if result.method == "loglikelihood":
        return canonical_json({"loglikelihoods": list(result.loglikelihoods)}).decode()
    return canonical_json({"chosen": result.chosen, "reply": result.raw_text}).decode()


def _rounded(result: ChoiceResult) -> ChoiceResult:
    lls = tuple(round(ll, LOGLIKELIHOOD_DECIMALS) + 0.0 for ll in result.loglikelihoods)
    return replace(result, loglikelihoods=lls)


def _run_requests(
    benchmark: Benchmark,
    backend: ModelBackend,
    requests: Sequence[GenerateRequest | ChoiceRequest],
    batch_size: int,
    progress: Progress,
) -> list[GenerateResult | ChoiceResult]:
    if benchmark.kind == "generate":
        gen = [r for r in requests if isinstance(r, GenerateRequest)]
        if len(gen) != len(requests):
            raise TypeError(f"{benchmark.name} mixes request kinds")
        return list(backend.generate(gen, batch_size=batch_size, progress=progress))
    choice = [r for r in requests if isinstance(r, ChoiceRequest)]
    if len(choice) != len(requests):
        raise TypeError(f"{benchmark.name} mixes request kinds")
    results = backend.choose(choice, batch_size=batch_size, progress=progress)
    return [_rounded(r) for r in results]


def select_samples(benchmark: Benchmark, n: int, seed: str) -> list[Sample]:
    """The samples a (benchmark, seed, n) task uses."""
    candidates = benchmark.sample_ids()
    if n > len(candidates):
        raise ConfigError(
            f"{benchmark.name} has {len(candidates)} samples; cannot draw {n}",
            hint=Hint("samples", "draw fewer samples"),
        )
    if n <= 0:
        raise ConfigError(
            f"cannot draw {n} samples", hint=Hint("samples", "draw at least one sample")
        )
    ids = sample_ids(benchmark.dataset_sha256, benchmark.version, seed, n, candidates)
    return benchmark.samples(ids)


def evaluate(
    benchmark: Benchmark,
    backend: ModelBackend,
    config: EvalConfig,
    progress: Progress = no_progress,
    samples: Sequence[Sample] | None = None,
) -> RunResult:
    """Run ``config.n`` samples of ``benchmark`` through ``backend`` and score them.

    ``samples`` are the ones :func:`select_samples` gives for ``config`` when the
    caller has them already (the runner checks them against its task first).
    """
    if config.batch_size < 1:
        raise ConfigError(
            f"batch size {config.batch_size} is too small",
            hint=Hint("batch_size", "the batch size must be at least 1"),
        )
    style = resolve_style(config, backend)
    if samples is None:
        samples = select_samples(benchmark, config.n, config.seed)
    elif len(samples) != config.n:
        raise ConfigError(f"{len(samples)} samples given for a run of {config.n}")
    requests = [benchmark.request(s, style) for s in samples]
    measurer = _measurer(config, backend) if config.measure else None
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    with measurer or contextlib.nullcontext():
        results = _run_requests(benchmark, backend, requests, config.batch_size, progress)
    runtime = time.perf_counter() - t0
    rows = []
    predictions = []
    for sample, request, result in zip(samples, requests, results, strict=True):
        scored = benchmark.score(sample, result)
        predictions.append(canonical_prediction(benchmark.kind, scored))
        raw = output_text(result)
        rows.append(
            SampleResult(
                id=sample.id,
                labels=sample.labels.as_dict(),
                prompt_sha256=request_digest(request),
                output=raw,
                output_sha256=sha256_hex(raw),
                prediction=scored.prediction,
                correct=scored.correct,
                score=scored.score,
                n_tokens=result.n_tokens,
            )
        )
    info = backend.info
    return RunResult(
        model={
            "ref": info.ref,
            "backend": info.backend,
            "revision": info.revision,
            "is_chat": info.is_chat,
            "device": info.device,
            "dtype": info.dtype,
            **({"details": info.details} if info.details else {}),
        },
        benchmark={
            "name": benchmark.name,
            "version": benchmark.version,
            "prompt_version": benchmark.prompt_version,
            "kind": benchmark.kind,
            "dataset_sha256": benchmark.dataset_sha256,
            "source": {
                "kind": benchmark.source.kind,
                "location": benchmark.source.location,
                "revision": benchmark.source.revision,
            },
            "prompt_style": style,
            "config": dict(benchmark.config),
        },
        sampling={"scheme": SAMPLING_SCHEME, "seed": config.seed, "n": config.n},
        aggregate=aggregate([r.score for r in rows]),
        runtime_s=runtime,
        tokens=sum(r.n_tokens for r in rows),
        outputs_sha256=outputs_digest((r.id, r.output_sha256) for r in rows),
        predictions_sha256=predictions_digest(predictions),
        sample_predictions=predictions,
        samples=rows,
        environment={
            "hardware": hardware(info.device),
            "libraries": library_versions(),
            "batch_size": config.batch_size,
        },
        started_at=started_at,
        slices=label_slices(rows),
        measurements=None if measurer is None else _measurements(measurer, results),
    )


def _measurer(config: EvalConfig, backend: ModelBackend) -> Measurer:
    try:
        return Measurer(backend.info.device, config.carbon_intensity)
    except ValueError as exc:
        raise ConfigError(
            str(exc), hint=Hint("carbon_intensity", "set QB_CARBON_INTENSITY to a code or g/kWh")
        ) from exc


def _measurements(
    measurer: Measurer, results: Sequence[GenerateResult | ChoiceResult]
) -> Measurements:
    """Generated tokens: the backend's counts for generations and letter replies (a
    log-likelihood's ``n_tokens`` are scored tokens, read rather than generated)."""
    generations = [r for r in results if isinstance(r, GenerateResult)]
    if generations:
        generated = sum(r.n_tokens for r in generations)
        return measurer.measurements(generated_tokens=generated, sequences=len(generations))
    letters = [r for r in results if isinstance(r, ChoiceResult) and r.method == "letter"]
    generated_letters = sum(r.n_tokens for r in letters) if letters else None
    return measurer.measurements(generated_tokens=generated_letters, sequences=len(letters))
