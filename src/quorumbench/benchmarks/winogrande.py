"""WinoGrande (winogrande_xl), zero-shot, by log-likelihood.

lm-evaluation-harness's ``winogrande`` task uses *partial* scoring: for each option
the context is the sentence up to the blank with the option filled in, and the one
shared continuation, ``" " + the rest of the sentence after the blank``, is scored
under each context. Our :class:`~quorumbench.evaluation.backend.ChoiceRequest` has
one context for all options (and the runner's wire format carries only that), so we
score *full* continuations instead: the context is the sentence up to the blank and
option ``i``'s continuation is ``option_i + " " + rest``. The text each option is
scored on is exactly lm-eval's; what differs is that the option's own tokens count
too, so the numbers are comparable in definition, not equal to lm-eval's. Metric
``acc``; see docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="allenai/winogrande",
    revision="01e74176c63542e6b0bcb004dcdea22d94fb67b5",
    filename="winogrande_xl/validation-00000-of-00001.parquet",
    rows=1267,
)
"""No SHA-256 of this file was found in public sources: the Hub's LFS metadata at
the pinned commit supplies it."""
LABELS = Labels(skill="reasoning", subject="social-intelligence/commonsense", format="mcqa")


class Blank(NamedTuple):
    before: str
    """The sentence up to the blank ``_``, as it is (a trailing space included)."""
    rest: str
    """lm-eval's target: the sentence after the blank, stripped."""


def split_sentence(sentence: str) -> Blank:
    """The sentence around its blank ``_`` (the first one)."""
    if "_" not in sentence:
        raise BadRow("the sentence has no blank '_'")
    blank = sentence.index("_")
    return Blank(sentence[:blank], sentence[blank + 1 :].strip())


class WinograndeBenchmark(HubChoiceBenchmark):
    """WinoGrande validation split of the XL configuration (1,267 sentences)."""

    name = "winogrande"
    FILE = DATA
    COLUMNS = ("sentence", "option1", "option2", "answer")
    PROMPT = "lm-eval winogrande, full-continuation scoring"

    def item(self, row: Mapping[str, Any]) -> Item:
        if row["answer"] not in ("1", "2"):
            raise BadRow(f"answer {row['answer']!r} is not '1' or '2'")
        before, rest = split_sentence(row["sentence"])
        options = (str(row["option1"]), str(row["option2"]))
        return Item(
            context=before,
            continuations=tuple(f"{o} {rest}" for o in options),
            options=options,
            question=row["sentence"],
            gold=int(row["answer"]) - 1,
            labels=LABELS,
        )
