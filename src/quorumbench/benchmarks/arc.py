"""ARC-Challenge (AI2 Reasoning Challenge), zero-shot, by log-likelihood.

As lm-evaluation-harness's ``arc_challenge`` task: the context is
``Question: <question>\\nAnswer:`` and each option is scored as ``" " + text``. The
gold is the option whose label equals ``answerKey`` (labels are ``A``..``E`` or,
for some items, ``1``..``4``); items have three to five options. Metric
``acc_norm``: log-likelihood per character of the option.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="allenai/ai2_arc",
    revision="210d026faf9955653af8916fad021475a3f00453",
    filename="ARC-Challenge/test-00000-of-00001.parquet",
    sha256="62f03257e737aed263f55c6abf87c7bb0028a44a6bdd2a26eb1279eb42c1d1e9",
    rows=1172,
)
LABELS = Labels(skill="reasoning", subject="science/general", format="mcqa")


class ArcChallengeBenchmark(HubChoiceBenchmark):
    """ARC-Challenge test split (1,172 grade-school science questions)."""

    name = "arc-challenge"
    FILE = DATA
    COLUMNS = ("id", "question", "choices", "answerKey")
    METRIC = "acc_norm"
    PROMPT = "lm-eval arc_challenge"

    def item(self, row: Mapping[str, Any]) -> Item:
        texts = [str(t) for t in row["choices"]["text"]]
        labels = [str(label) for label in row["choices"]["label"]]
        if len(texts) != len(labels):
            raise BadRow("choices.text and choices.label differ in length")
        if row["answerKey"] not in labels:
            raise BadRow(f"answerKey {row['answerKey']!r} is not one of the labels {labels}")
        return Item(
            context=f"Question: {row['question']}\nAnswer:",
            continuations=tuple(" " + t for t in texts),
            options=tuple(texts),
            question=row["question"],
            gold=labels.index(row["answerKey"]),
            labels=LABELS,
        )
