"""HellaSwag, zero-shot, by log-likelihood.

As lm-evaluation-harness's ``hellaswag`` task (``utils.process_docs``): the context
is ``activity_label + ": " + ctx_a + " " + ctx_b.capitalize()`` and each ending is
scored as ``" " + ending``, both cleaned by lm-eval's ``preprocess`` (strip,
``" [title]"`` becomes ``". "``, bracketed WikiHow artefacts removed, double spaces
made single). Metric ``acc_norm``: log-likelihood per character of the ending.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="Rowan/hellaswag",
    revision="218ec52e09a7e7462a5400043bb9a69a41d06b76",
    filename="data/validation-00000-of-00001.parquet",
    sha256="899813071e1e95efafec90f856e1987d2150fa4d020fc005df6962c259f660cd",
    rows=10042,
)
_BRACKETS = re.compile(r"\[.*?\]")


def preprocess(text: str) -> str:
    """lm-eval's HellaSwag cleaning, step for step."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = _BRACKETS.sub("", text)
    return text.replace("  ", " ")


class HellaSwagBenchmark(HubChoiceBenchmark):
    """HellaSwag validation split (10,042 items, four endings each)."""

    name = "hellaswag"
    FILE = DATA
    COLUMNS = ("activity_label", "ctx_a", "ctx_b", "endings", "label")
    METRIC = "acc_norm"
    PROMPT = "lm-eval hellaswag"

    def item(self, row: Mapping[str, Any]) -> Item:
        label = str(row["label"]).strip()
        if not label.isdigit():
            raise BadRow(f"label {row['label']!r} is not an ending index")
        ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
        query = preprocess(row["activity_label"] + ": " + ctx)
        endings = [preprocess(e) for e in row["endings"]]
        return Item(
            context=query,
            continuations=tuple(" " + e for e in endings),
            options=tuple(endings),
            question=query,
            gold=int(label),
            labels=Labels(
                skill="reasoning",
                subject="culture/daily-life",
                format="mcqa",
                source_category=row["activity_label"],
            ),
        )
