"""The benchmark contract: samples, requests and scores.

A benchmark names its data exactly (the SHA-256 of the bytes it reads), lists its
candidate sample ids, turns a sample into a backend request and scores what the
backend returned. Changing the data, the prompt template or the scorer is a new
version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
)
from quorumbench.evaluation.execution import CodeExecutor

PromptStyle = Literal["chat", "plain"]
BenchmarkKind = Literal["generate", "choice"]


@dataclass(frozen=True)
class Labels:
    """Per-sample labels in taxonomy v1 (``core/taxonomy.py``), for sliced leaderboards.

    ``skill`` (knowledge, reasoning, value, alignment), ``subject`` (``coarse`` or
    ``coarse/fine``: ``science/math``), ``format`` (binary, mcqa, short-form,
    open-ended, code), ``language`` (ISO 639-1), ``target`` (``general`` or
    ``local/<country>``); ``source_category`` keeps the source dataset's own category.
    """

    skill: str
    subject: str
    language: str = "en"
    format: str = "short-form"
    target: str = "general"
    source_category: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {
            "skill": self.skill,
            "subject": self.subject,
            "target": self.target,
            "format": self.format,
            "language": self.language,
        }
        if self.source_category is not None:
            out["source_category"] = self.source_category
        return out


@dataclass(frozen=True)
class Sample:
    """One benchmark item. ``fields`` holds benchmark-specific data."""

    id: str
    labels: Labels
    fields: Mapping[str, Any]
    chance: float = 0.0
    """The score a uniform random guess expects on this item: ``1/k`` for a
    multiple-choice item with ``k`` options and one correct, the mean score over the
    options where several count (TruthfulQA MC2: true options / options); 0 for a
    generative item. The leaderboard's chance correction averages it over the items
    a model was measured on."""


@dataclass(frozen=True)
class Scored:
    """How one output scored: the extracted prediction, correctness and score."""

    prediction: str | None
    """What the model answered: for a ``choice`` benchmark the chosen option's index as a
    decimal string (``"0"``), for a ``generate`` benchmark the extracted answer; None when
    there is none. The engine turns it into the run's canonical prediction
    (``evaluation/predictions.py``), which runners compare through its digest."""
    correct: bool
    score: float


@dataclass(frozen=True)
class BenchmarkContext:
    """What a benchmark factory gets: where local data lives and prompt overrides."""

    datasets_dir: Path | None = None
    shots: int | None = None
    max_new_tokens: int | None = None
    executor: CodeExecutor | None = None
    """Runs generated code for code benchmarks (HumanEval, MBPP): the runner's sandbox.
    None: such a benchmark loads (its samples can be listed) but refuses to score."""


@dataclass(frozen=True)
class DataSourceInfo:
    """Where the data came from, for the result file."""

    kind: Literal["local", "hub", "generated", "file", "url"]
    location: str
    revision: str | None = None


@runtime_checkable
class Benchmark(Protocol):
    """A loaded, checksum-verified benchmark."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def prompt_version(self) -> int: ...

    @property
    def kind(self) -> BenchmarkKind: ...

    @property
    def dataset_sha256(self) -> str: ...

    @property
    def source(self) -> DataSourceInfo: ...

    @property
    def config(self) -> Mapping[str, Any]:
        """Prompt options that change requests (shots, token limit); recorded per run."""
        ...

    def sample_ids(self) -> Sequence[str]:
        """Every candidate sample id."""
        ...

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        """The samples with these ids, in the same order."""
        ...

    def request(self, sample: Sample, style: PromptStyle) -> GenerateRequest | ChoiceRequest:
        """The backend request for one sample."""
        ...

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        """Score the backend's answer to :meth:`request`."""
        ...
