"""Prompting and scoring shared by the free-form maths benchmarks (gsm8k, arith).

Plain style (base models) mirrors lm-evaluation-harness's ``gsm8k`` task:
``Question: <q>\\nAnswer: <worked answer>`` exemplars joined by a blank line, then
``Question: <q>\\nAnswer:``. Chat style (instruct models) puts the same exemplars as
earlier user/assistant turns after a short system instruction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    Prompt,
)
from quorumbench.evaluation.benchmark import PromptStyle, Scored
from quorumbench.evaluation.extract import extract_final_number

SYSTEM = (
    "Solve the math word problem step by step. End with a final line of the form '#### <number>'."
)
PLAIN_STOPS = ("Question:", "</s>", "<|im_end|>")
CHAT_STOPS = ("Question:",)
_CALCULATOR = re.compile(r"<<[^>]*>>")


@dataclass(frozen=True)
class Exemplar:
    question: str
    answer: str


def clean_worked_answer(answer: str) -> str:
    """A GSM8K worked answer without its ``<<calculator>>`` annotations."""
    return _CALCULATOR.sub("", answer)


def math_request(
    question: str,
    shots: Sequence[Exemplar],
    style: PromptStyle,
    max_new_tokens: int,
) -> GenerateRequest:
    """The generation request for one question."""
    if style == "plain":
        parts = [f"Question: {s.question}\nAnswer: {s.answer}" for s in shots]
        parts.append(f"Question: {question}\nAnswer:")
        return GenerateRequest(Prompt(text="\n\n".join(parts)), PLAIN_STOPS, max_new_tokens)
    messages = [ChatMessage("system", SYSTEM)]
    for shot in shots:
        messages.append(ChatMessage("user", f"Question: {shot.question}"))
        messages.append(ChatMessage("assistant", clean_worked_answer(shot.answer)))
    messages.append(ChatMessage("user", f"Question: {question}"))
    return GenerateRequest(Prompt(messages=tuple(messages)), CHAT_STOPS, max_new_tokens)


def score_number(gold: str, result: GenerateResult | ChoiceResult) -> Scored:
    """Exact match of the extracted final number against ``gold`` (normalised)."""
    if not isinstance(result, GenerateResult):
        raise TypeError("a maths benchmark scores generated text")
    prediction = extract_final_number(result.text)
    correct = prediction is not None and prediction == gold
    return Scored(prediction, correct, 1.0 if correct else 0.0)
