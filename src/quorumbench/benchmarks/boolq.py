"""BoolQ, zero-shot yes/no questions about a passage, by log-likelihood.

As lm-evaluation-harness's ``boolq`` task: the context is
``<passage>\\nQuestion: <question>?\\nAnswer:`` and the continuations are ``" no"``
and ``" yes"``; the gold is ``" yes"`` when ``answer`` is true. Metric ``acc``.
lm-eval reads SuperGLUE's copy (``aps/super_glue``, integer ``label``); we read
Google's own (``google/boolq``, boolean ``answer``): the same questions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="google/boolq",
    revision="35b264d03638db9f4ce671b711558bf7ff0f80d5",
    filename="data/validation-00000-of-00001.parquet",
    sha256="52355d11524b4b874a9b9dcc278feb10f672d52c4f4eff9872e695ede59820f8",
    rows=3270,
)
LABELS = Labels(skill="reasoning", subject="hass/reading-comprehension", format="binary")


class BoolQBenchmark(HubChoiceBenchmark):
    """BoolQ validation split (3,270 questions)."""

    name = "boolq"
    FILE = DATA
    COLUMNS = ("question", "answer", "passage")
    PROMPT = "lm-eval boolq"

    def item(self, row: Mapping[str, Any]) -> Item:
        if not isinstance(row["answer"], bool):
            raise BadRow(f"answer {row['answer']!r} is not a boolean")
        return Item(
            context=f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:",
            continuations=(" no", " yes"),
            options=("no", "yes"),
            question=f"{row['passage']}\n\n{row['question']}?",
            gold=1 if row["answer"] else 0,
            labels=LABELS,
        )
