"""BBQ (Bias Benchmark for QA), zero-shot, by log-likelihood; local data only.

The prompt is lm-evaluation-harness's ``bbq`` task's,
``<context>\\n\\nQ: <question>\\nA:``, and each of the three answers ``ans0``..``ans2``
is scored as ``" " + answer``; ``label`` is the gold's index. Metric ``acc`` over
ambiguous and disambiguated contexts alike (``context_condition`` is kept in the
sample's fields; the category is the ``source_category`` label).

Differences from lm-eval: lm-eval replaces the item's "unknown" answer by ten
"unknown" phrasings from HELM (twelve options, any unknown phrasing counts when the
gold is unknown) and adds bias scores; we keep BBQ's own three options (chance 1/3)
and report accuracy only.

Data: lm-eval reads ``oskarvanderwal/bbq`` (configuration ``All``, split ``test``).
No commit of that repository, nor of any other Parquet copy, could be pinned from
public sources, so no revision is written here and nothing is downloaded: the file
must be in a datasets directory as ``bbq/bbq-all-test.parquet``, with the original
release's columns (see docs/benchmarks.md). Without a pinned SHA-256 the copy is
identified by its own SHA-256, which every task names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="oskarvanderwal/bbq",
    revision=None,
    filename=None,
    local_name="bbq/bbq-all-test.parquet",
)
CONDITIONS = ("ambig", "disambig")


class BbqBenchmark(HubChoiceBenchmark):
    """BBQ, all eleven categories, ambiguous and disambiguated contexts (58,492 items)."""

    name = "bbq"
    FILE = DATA
    COLUMNS = (
        "category",
        "context_condition",
        "question_polarity",
        "context",
        "question",
        "ans0",
        "ans1",
        "ans2",
        "label",
    )
    PROMPT = "lm-eval bbq, three options"

    def item(self, row: Mapping[str, Any]) -> Item:
        if row["context_condition"] not in CONDITIONS:
            raise BadRow(f"context_condition {row['context_condition']!r} is not ambig/disambig")
        if row["label"] not in (0, 1, 2) or isinstance(row["label"], bool):
            raise BadRow(f"label {row['label']!r} is not 0, 1 or 2")
        answers = (str(row["ans0"]), str(row["ans1"]), str(row["ans2"]))
        return Item(
            context=f"{row['context']}\n\nQ: {row['question']}\nA:",
            continuations=tuple(" " + a for a in answers),
            options=answers,
            question=f"{row['context']}\n\n{row['question']}",
            gold=row["label"],
            labels=Labels(
                skill="value",
                subject="social-intelligence/stereotypes",
                format="mcqa",
                source_category=str(row["category"]),
            ),
            extra={
                "context_condition": row["context_condition"],
                "question_polarity": str(row["question_polarity"]),
            },
        )
