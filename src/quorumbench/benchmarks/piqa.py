"""PIQA (physical commonsense), zero-shot, by log-likelihood.

As lm-evaluation-harness's ``piqa`` task: the context is
``Question: <goal>\\nAnswer:`` and the two solutions are scored as
``" " + sol1`` and ``" " + sol2``; ``label`` is the gold's index. Metric
``acc_norm``: log-likelihood per character of the solution. The data is
``lighteval/piqa``, a Parquet copy of ``ybisk/piqa`` (whose loading script the
``datasets`` library no longer runs); lm-eval reads another copy, ``baber/piqa``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="lighteval/piqa",
    revision="41782e6bf0ef7de82a2ca8a9feb1dca042837fae",
    filename="plain_text/validation-00000-of-00001.parquet",
    rows=1838,
)
"""No SHA-256 of this file was found in public sources: the Hub's LFS metadata at
the pinned commit supplies it."""
LABELS = Labels(skill="reasoning", subject="science/physical-commonsense", format="mcqa")


class PiqaBenchmark(HubChoiceBenchmark):
    """PIQA validation split (1,838 goals, two solutions each)."""

    name = "piqa"
    FILE = DATA
    COLUMNS = ("goal", "sol1", "sol2", "label")
    METRIC = "acc_norm"
    PROMPT = "lm-eval piqa"

    def item(self, row: Mapping[str, Any]) -> Item:
        if row["label"] not in (0, 1) or isinstance(row["label"], bool):
            raise BadRow(f"label {row['label']!r} is not 0 or 1")
        solutions = (str(row["sol1"]), str(row["sol2"]))
        return Item(
            context=f"Question: {row['goal']}\nAnswer:",
            continuations=tuple(" " + s for s in solutions),
            options=solutions,
            question=row["goal"],
            gold=row["label"],
            labels=LABELS,
        )
