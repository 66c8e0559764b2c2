"""MMLU (all 57 subjects), zero-shot, by log-likelihood of the answer letter.

As lm-evaluation-harness's ``mmlu`` default tasks: the context is the subject's
description, ``The following are multiple choice questions (with answers) about
<subject>.\\n\\n`` (the subject's name with ``_`` as spaces), then
``<question, stripped>\\nA. <c0>\\nB. <c1>\\nC. <c2>\\nD. <c3>\\nAnswer:``; the
continuations are ``" A"``..``" D"``. Metric ``acc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorumbench.benchmarks._hubchoice import BadRow, HubChoiceBenchmark, Item
from quorumbench.evaluation.benchmark import Labels
from quorumbench.evaluation.hubdata import HubFile

DATA = HubFile(
    repo_id="cais/mmlu",
    revision="c30699e8356da336a370243923dbaf21066bb9fe",
    filename="all/test-00000-of-00001.parquet",
    rows=14042,
)
"""No SHA-256 of this file was found in public sources: the Hub's LFS metadata at
the pinned commit supplies it."""
LETTERS = ("A", "B", "C", "D")
SUBJECTS = {
    "abstract_algebra": "science/math",
    "anatomy": "science/medicine",
    "astronomy": "science/astronomy",
    "business_ethics": "hass/business",
    "clinical_knowledge": "science/medicine",
    "college_biology": "science/biology",
    "college_chemistry": "science/chemistry",
    "college_computer_science": "tech/computer-science",
    "college_mathematics": "science/math",
    "college_medicine": "science/medicine",
    "college_physics": "science/physics",
    "computer_security": "tech/security",
    "conceptual_physics": "science/physics",
    "econometrics": "hass/economics",
    "electrical_engineering": "tech/engineering",
    "elementary_mathematics": "science/math",
    "formal_logic": "science/logic",
    "global_facts": "culture/trivia",
    "high_school_biology": "science/biology",
    "high_school_chemistry": "science/chemistry",
    "high_school_computer_science": "tech/computer-science",
    "high_school_european_history": "hass/history",
    "high_school_geography": "hass/geography",
    "high_school_government_and_politics": "hass/politics",
    "high_school_macroeconomics": "hass/economics",
    "high_school_mathematics": "science/math",
    "high_school_microeconomics": "hass/economics",
    "high_school_physics": "science/physics",
    "high_school_psychology": "science/psychology",
    "high_school_statistics": "science/math",
    "high_school_us_history": "hass/history",
    "high_school_world_history": "hass/history",
    "human_aging": "science/medicine",
    "human_sexuality": "science/health",
    "international_law": "hass/law",
    "jurisprudence": "hass/law",
    "logical_fallacies": "science/logic",
    "machine_learning": "tech/machine-learning",
    "management": "hass/business",
    "marketing": "hass/business",
    "medical_genetics": "science/medicine",
    "miscellaneous": "culture/trivia",
    "moral_disputes": "hass/ethics",
    "moral_scenarios": "hass/ethics",
    "nutrition": "science/health",
    "philosophy": "hass/philosophy",
    "prehistory": "hass/history",
    "professional_accounting": "hass/business",
    "professional_law": "hass/law",
    "professional_medicine": "science/medicine",
    "professional_psychology": "science/psychology",
    "public_relations": "hass/business",
    "security_studies": "hass/politics",
    "sociology": "hass/sociology",
    "us_foreign_policy": "hass/politics",
    "virology": "science/medicine",
    "world_religions": "hass/religion",
}
"""MMLU's 57 subjects as taxonomy-v1 subjects (the subject itself is kept as
``source_category``)."""


def description(subject: str) -> str:
    """lm-eval's per-subject description, which opens the zero-shot context."""
    name = subject.replace("_", " ")
    return f"The following are multiple choice questions (with answers) about {name}.\n\n"


class MmluBenchmark(HubChoiceBenchmark):
    """MMLU test split, all subjects (14,042 questions, four options each)."""

    name = "mmlu"
    FILE = DATA
    COLUMNS = ("question", "subject", "choices", "answer")
    PROMPT = "lm-eval mmlu (default)"

    def item(self, row: Mapping[str, Any]) -> Item:
        subject = row["subject"]
        if subject not in SUBJECTS:
            raise BadRow(f"subject {subject!r} is not one of MMLU's 57")
        choices = [str(c) for c in row["choices"]]
        if len(choices) != len(LETTERS):
            raise BadRow(f"{len(choices)} choices, not 4")
        if row["answer"] not in range(4) or isinstance(row["answer"], bool):
            raise BadRow(f"answer {row['answer']!r} is not 0..3")
        listed = "".join(f"\n{letter}. {c}" for letter, c in zip(LETTERS, choices, strict=True))
        question = row["question"].strip()
        return Item(
            context=f"{description(subject)}{question}{listed}\nAnswer:",
            continuations=tuple(" " + letter for letter in LETTERS),
            options=tuple(choices),
            question=question,
            gold=row["answer"],
            labels=Labels(
                skill="knowledge",
                subject=SUBJECTS[subject],
                format="mcqa",
                source_category=subject,
            ),
        )
