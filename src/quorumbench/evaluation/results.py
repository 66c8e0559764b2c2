"""Per-sample and per-run results, and the stable ``--json`` format.

The format is documented in ``docs/results-format.md``; ``SCHEMA`` names its
version and changes whenever a key changes meaning or disappears.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from quorumbench.core.scoring import Aggregate
from quorumbench.evaluation.predictions import Prediction
from quorumbench.protocol import Measurements

SCHEMA = "quorumbench.eval-result/v2"


@dataclass(frozen=True)
class SampleResult:
    """One scored sample."""

    id: str
    labels: dict[str, str]
    prompt_sha256: str
    output: str
    output_sha256: str
    prediction: str | None
    correct: bool
    score: float
    n_tokens: int


@dataclass(frozen=True)
class LabelSlice:
    """Mean score of the samples that share one label value."""

    label: str
    value: str
    n: int
    score: float


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced. ``to_json`` gives the documented file format."""

    model: dict[str, Any]
    benchmark: dict[str, Any]
    sampling: dict[str, Any]
    aggregate: Aggregate
    runtime_s: float
    tokens: int
    outputs_sha256: str
    predictions_sha256: str
    """Digest of ``sample_predictions`` (the same for any batch size or backend path)."""
    sample_predictions: Sequence[Prediction]
    """Canonical prediction per sample, in sampling order (evaluation/predictions.py)."""
    samples: Sequence[SampleResult]
    environment: dict[str, Any]
    started_at: str
    slices: Sequence[LabelSlice] = field(default_factory=list)
    measurements: Measurements | None = None
    """Energy, CO₂, tokens, latency and memory measured around the run (absent when
    it was not measured; evaluation/measure.py)."""

    @property
    def score(self) -> float:
        return self.aggregate.mean

    @property
    def n(self) -> int:
        return self.aggregate.n

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.runtime_s if self.runtime_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.n / self.runtime_s if self.runtime_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "benchmark": self.benchmark,
            "sampling": self.sampling,
            "score": self.score,
            "n": self.n,
            "correct": sum(1 for s in self.samples if s.correct),
            "stderr": self.aggregate.stderr,
            "ci95": [self.aggregate.ci_low, self.aggregate.ci_high],
            "runtime_s": round(self.runtime_s, 3),
            "tokens": self.tokens,
            "tokens_per_s": round(self.tokens_per_s, 2),
            "samples_per_s": round(self.samples_per_s, 4),
            "outputs_sha256": self.outputs_sha256,
            "predictions_sha256": self.predictions_sha256,
            "sample_predictions": list(self.sample_predictions),
            "started_at": self.started_at,
            "environment": self.environment,
            "slices": [asdict(s) for s in self.slices],
            **(
                {"measurements": self.measurements.model_dump(mode="json")}
                if self.measurements is not None
                else {}
            ),
            "samples": [asdict(s) for s in self.samples],
        }


def label_slices(samples: Sequence[SampleResult]) -> list[LabelSlice]:
    """Mean score per (label, value), sorted by label then value."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for sample in samples:
        for label, value in sample.labels.items():
            groups[(label, value)].append(sample.score)
    return [
        LabelSlice(label, value, len(scores), sum(scores) / len(scores))
        for (label, value), scores in sorted(groups.items())
    ]
