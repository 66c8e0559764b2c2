"""The shared shape of the zero-shot, log-likelihood multiple-choice Hub benchmarks.

Each benchmark module turns one row of its pinned Parquet file into an :class:`Item`
(the context, one continuation per option, the gold index, the labels); this base
loads and verifies the file, lists samples, builds requests and scores them as
lm-evaluation-harness's ``multiple_choice`` tasks do:

* ``acc``: the option with the highest summed log-likelihood (the first one wins a
  tie, as ``numpy.argmax``) is the prediction; score 1 when it is the gold;
* ``acc_norm``: the same after dividing each log-likelihood by the length in
  characters of the option's text (lm-eval's ``acc_norm``: the choice string
  without the target delimiter).

Every sample's ``chance`` is ``1/k`` for its own ``k`` options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from quorumbench.benchmarks.truthfulqa import choice_request, scored_pick
from quorumbench.core.scoring import argmax_first
from quorumbench.errors import ConfigError, DataError
from quorumbench.evaluation.backend import ChoiceRequest, ChoiceResult, GenerateResult
from quorumbench.evaluation.benchmark import (
    BenchmarkContext,
    BenchmarkKind,
    DataSourceInfo,
    Labels,
    PromptStyle,
    Sample,
    Scored,
)
from quorumbench.evaluation.hubdata import HubFile, Rows, load_hub_file, require_columns

Metric = Literal["acc", "acc_norm"]
ID_WIDTH = 5


@dataclass(frozen=True)
class Item:
    """One multiple-choice question as the model sees it."""

    context: str
    continuations: tuple[str, ...]
    """What is scored after ``context``, one per option (lm-eval: delimiter + choice)."""
    options: tuple[str, ...]
    """The options' own text: the letter-choice fallback shows it, ``acc_norm``
    divides by its length."""
    question: str
    """The question the letter-choice fallback shows above the options."""
    gold: int
    labels: Labels
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Further per-sample fields (BBQ's ``context_condition``)."""


class BadRow(ValueError):
    """Raised by a module's ``item`` for a row it cannot use; the base adds where."""


class HubChoiceBenchmark:
    """Base of the Hub multiple-choice benchmarks; subclasses set the class fields."""

    name: str
    FILE: ClassVar[HubFile]
    COLUMNS: ClassVar[tuple[str, ...]]
    METRIC: ClassVar[Metric] = "acc"
    PROMPT: ClassVar[str]
    """Which lm-eval task's prompt this mirrors, recorded in ``config``."""
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "choice"

    def __init__(self, context: BenchmarkContext, file: HubFile | None = None) -> None:
        if context.shots not in (None, 0):
            raise ConfigError(
                f"{self.name} is zero-shot, as lm-eval's task is; it takes no exemplars"
            )
        self._file = file or self.FILE
        loaded = load_hub_file(self._file, context.datasets_dir)
        require_columns(self._file, loaded.rows, self.COLUMNS)
        self._items = self._parse(loaded.rows)
        self._sha256 = loaded.sha256
        self._source = loaded.source

    def _parse(self, rows: Rows) -> list[Item]:
        items = []
        for index, row in enumerate(rows):
            try:
                item = self.item(row)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                raise DataError(
                    f"{self._file.address} row {index}: {exc}; it is not the pinned file "
                    "(give a datasets directory that holds it)"
                ) from exc
            if not 0 <= item.gold < len(item.continuations) or len(item.continuations) < 2:
                raise DataError(f"{self._file.address} row {index}: no valid gold option")
            items.append(item)
        return items

    def item(self, row: Mapping[str, Any]) -> Item:
        """The item of one Parquet row (BadRow when the row is unusable)."""
        raise NotImplementedError

    @property
    def dataset_sha256(self) -> str:
        return self._sha256

    @property
    def source(self) -> DataSourceInfo:
        return self._source

    @property
    def config(self) -> Mapping[str, Any]:
        return {"prompt": self.PROMPT, "shots": 0, "metric": self.METRIC}

    def sample_ids(self) -> Sequence[str]:
        return [f"{i:0{ID_WIDTH}d}" for i in range(len(self._items))]

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            item = self._item_at(sample_id)
            fields = {
                "context": item.context,
                "continuations": list(item.continuations),
                "options": list(item.options),
                "question": item.question,
                "gold": item.gold,
                **item.extra,
            }
            chance = 1 / len(item.continuations)
            out.append(Sample(sample_id, item.labels, fields, chance=chance))
        return out

    def _item_at(self, sample_id: str) -> Item:
        if not sample_id.isdigit() or int(sample_id) >= len(self._items):
            raise DataError(f"{self.name} has no sample {sample_id!r}")
        return self._items[int(sample_id)]

    def request(self, sample: Sample, style: PromptStyle) -> ChoiceRequest:
        fields = sample.fields
        return choice_request(self.name, sample, fields["context"], fields["continuations"])

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        if not isinstance(result, ChoiceResult):
            raise TypeError(f"{self.name} scores multiple-choice results")
        if result.method == "letter":
            chosen = result.chosen
        else:
            chosen = argmax_first(self._weighted(result.loglikelihoods, sample))
        return scored_pick(chosen, sample.fields["gold"])

    def _weighted(self, lls: Sequence[float], sample: Sample) -> list[float]:
        options: list[str] = sample.fields["options"]
        if len(lls) != len(options):
            raise ValueError(f"{self.name}: {len(lls)} log-likelihoods for {len(options)} options")
        if self.METRIC == "acc":
            return list(lls)
        return [ll / max(len(o), 1) for ll, o in zip(lls, options, strict=True)]
