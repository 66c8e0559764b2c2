"""Shared machinery of the procedurally generated benchmarks (arith, gen-*).

An item is a pure function of its id: every number it needs is drawn from SHA-256 of
(generator name, id, counter) by :class:`Draw`, so every platform builds the same
text without a data file. A generated benchmark's ``dataset_sha256`` is the hash of
its generator name and pool size (:func:`generated_sha256`), and its pool is
``POOL_SIZE`` zero-padded ids.

:class:`GeneratedChoiceBenchmark` is the base of the multiple-choice generators: an
item (:class:`ChoiceItem`) carries its log-likelihood context, the question shown in
a letter-choice prompt, the options and the gold index; scoring is accuracy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from quorumbench.benchmarks.truthfulqa import choice_request, scored_pick
from quorumbench.core.canonical import sha256_hex
from quorumbench.core.scoring import argmax_first
from quorumbench.errors import DataError
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

POOL_SIZE = 100_000
_T = TypeVar("_T")


class Draw:
    """Deterministic integers from SHA-256 of (generator, id, counter)."""

    def __init__(self, generator: str, item_id: str) -> None:
        self._generator = generator
        self._id = item_id
        self._counter = 0

    def below(self, n: int) -> int:
        key = f"{self._generator}\0{self._id}\0{self._counter}"
        digest = hashlib.sha256(key.encode()).digest()
        self._counter += 1
        return int.from_bytes(digest[:8], "big") % n

    def between(self, low: int, high: int) -> int:
        return low + self.below(high - low + 1)

    def pick(self, options: Sequence[_T]) -> _T:
        return options[self.below(len(options))]

    def shuffled(self, items: Sequence[_T]) -> list[_T]:
        """A permutation of ``items`` (Fisher–Yates)."""
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def distinct(self, options: Sequence[_T], k: int) -> list[_T]:
        """``k`` different elements of ``options``, in random order."""
        return self.shuffled(options)[:k]


def generated_sha256(generator: str, pool_size: int = POOL_SIZE) -> str:
    """A generated benchmark's dataset digest: its generator name and pool size."""
    return sha256_hex(f"{generator}\0{pool_size}")


@cache
def pool_ids(pool_size: int = POOL_SIZE) -> tuple[str, ...]:
    """The pool's ids, zero-padded to the width of the largest (made once per size:
    each epoch's scheduling draws from them for every task)."""
    width = len(str(pool_size - 1))
    return tuple(f"{i:0{width}d}" for i in range(pool_size))


def is_pool_id(sample_id: str, pool_size: int = POOL_SIZE) -> bool:
    width = len(str(pool_size - 1))
    return len(sample_id) == width and sample_id.isdigit() and int(sample_id) < pool_size


def article(noun_phrase: str) -> str:
    """``a`` or ``an`` before a noun phrase (by its first letter; our word lists only)."""
    return "an" if noun_phrase[:1].lower() in "aeiou" else "a"


@dataclass(frozen=True)
class ChoiceItem:
    """One generated multiple-choice item.

    ``context`` is what the options continue under log-likelihood scoring (each option
    is scored as ``" " + option``); ``question`` is the text a letter-choice prompt
    shows above the lettered options; ``options[gold]`` is the correct one.
    """

    context: str
    question: str
    options: tuple[str, ...]
    gold: int
    labels: Labels


def with_gold_at(d: Draw, correct: str, wrong: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """The options (the correct one among ``wrong`` in a random position) and its index."""
    options = d.shuffled([correct, *wrong])
    return tuple(options), options.index(correct)


class GeneratedChoiceBenchmark:
    """Base of the generated multiple-choice benchmarks: samples, requests, accuracy.

    A subclass sets ``name`` and ``generator`` and implements :meth:`item`. Each
    sample's chance level is ``1/k`` for its ``k`` options (one of them correct).
    """

    name: str
    generator: str
    version = 1
    prompt_version = 1
    kind: BenchmarkKind = "choice"

    def __init__(self, context: BenchmarkContext) -> None:
        del context  # nothing to load and no prompt options

    def item(self, item_id: str) -> ChoiceItem:
        """The item with this id; a pure function of it."""
        raise NotImplementedError

    @property
    def dataset_sha256(self) -> str:
        return generated_sha256(self.generator)

    @property
    def source(self) -> DataSourceInfo:
        return DataSourceInfo("generated", self.generator)

    @property
    def config(self) -> Mapping[str, Any]:
        return {"pool_size": POOL_SIZE, "target_delimiter": " "}

    def sample_ids(self) -> Sequence[str]:
        return pool_ids()

    def samples(self, ids: Sequence[str]) -> list[Sample]:
        out = []
        for sample_id in ids:
            if not is_pool_id(sample_id):
                raise DataError(f"{self.name} has no sample {sample_id!r}")
            item = self.item(sample_id)
            fields = {
                "context": item.context,
                "question": item.question,
                "options": list(item.options),
                "gold": item.gold,
            }
            out.append(Sample(sample_id, item.labels, fields, chance=1 / len(item.options)))
        return out

    def request(self, sample: Sample, style: PromptStyle) -> ChoiceRequest:
        del style  # the same request serves both; chat endpoints get letter choice
        continuations = [" " + o for o in sample.fields["options"]]
        return choice_request(self.name, sample, sample.fields["context"], continuations)

    def score(self, sample: Sample, result: GenerateResult | ChoiceResult) -> Scored:
        if not isinstance(result, ChoiceResult):
            raise TypeError(f"{self.name} scores multiple-choice results")
        lls = result.loglikelihoods
        chosen = result.chosen if result.method == "letter" else argmax_first(lls)
        return scored_pick(chosen, sample.fields["gold"])
