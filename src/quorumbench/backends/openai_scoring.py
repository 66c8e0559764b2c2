"""What an OpenAI-compatible answer means: echoed log-probabilities and letter replies.

Pure functions over decoded JSON, used by :mod:`quorumbench.backends.openai_compat`.
"""

from __future__ import annotations

import re
import string
from typing import Any

from quorumbench.errors import EndpointError
from quorumbench.evaluation.backend import ChoiceRequest

Json = dict[str, Any]

LETTERS = string.ascii_uppercase
LETTER_INSTRUCTION = (
    "Answer the following multiple-choice question. "
    "Reply with the letter of the correct option only."
)


class EchoUnsupported(Exception):
    """The endpoint cannot echo prompt log-probabilities."""


def letter_prompt(request: ChoiceRequest) -> str:
    """The letter-choice prompt: the options in ``letter_order``, labelled A, B, C."""
    lines = [LETTER_INSTRUCTION, "", f"Question: {request.question}"]
    for letter, index in zip(LETTERS, request.letter_order, strict=False):
        lines.append(f"{letter}. {request.options[index]}")
    lines += ["", "Answer:"]
    return "\n".join(lines)


def parse_letter(reply: str, n_options: int) -> int | None:
    """Position (0 = A) of the first standalone option letter in ``reply``, if any."""
    for match in re.finditer(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])", reply):
        position = ord(match.group(1)) - ord("A")
        if position < n_options:
            return position
    return None


def continuation_logprob(logprobs: Json, context_len: int, prompt_len: int) -> tuple[float, int]:
    """Sum of the log-probabilities of the tokens that cover ``prompt[context_len:]``.

    ``logprobs`` is a completion choice's ``logprobs`` object (``tokens``,
    ``token_logprobs``, ``text_offset``). A token counts when it ends after the
    context and starts inside the prompt (tokens a server generated after the prompt
    are ignored). Returns the sum and the number of tokens.

    Raises:
        EchoUnsupported: the object lacks the echoed prompt tokens.
    """
    tokens = logprobs.get("tokens")
    values = logprobs.get("token_logprobs")
    offsets = logprobs.get("text_offset")
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(offsets, list)):
        raise EchoUnsupported("no tokens/token_logprobs/text_offset in the answer")
    if not tokens or len(tokens) != len(values) or len(tokens) != len(offsets):
        raise EchoUnsupported("tokens, token_logprobs and text_offset differ in length")
    if offsets[0] != 0:
        raise EchoUnsupported("the answer does not echo the prompt")
    total, count = 0.0, 0
    for i, (start, value) in enumerate(zip(offsets, values, strict=True)):
        end = offsets[i + 1] if i + 1 < len(offsets) else start + len(str(tokens[i]))
        if start >= prompt_len or end <= context_len:
            continue
        if value is None:
            raise EndpointError(
                "the endpoint gave no log-probability for the first option token "
                "(an option at the very start of the prompt cannot be scored)"
            )
        total += float(value)
        count += 1
    if count == 0:
        raise EchoUnsupported("no echoed token covers the continuation")
    return total, count


def check_echo_alignment(choice: Json, prompt: str) -> None:
    """Refuse echoed log-probabilities that stop before the token the server generated.

    With ``echo`` and ``max_tokens: 1`` a server returns the prompt's tokens and the one
    it generated. llama-cpp-python (0.3.x) drops the generated one exactly when the
    model adds no BOS token (SmolLM2, Qwen, GPT-2 style vocabularies), and then gives
    each prompt token the log-probability of the *next* position (off by one): the
    scores would look plausible and be wrong. An answer whose text runs past the
    prompt while its tokens end at the prompt is that case.

    Raises:
        EchoUnsupported: the echoed log-probabilities cannot be trusted.
    """
    text = choice.get("text")
    logprobs = choice.get("logprobs")
    if not (isinstance(text, str) and isinstance(logprobs, dict)):
        return
    tokens, offsets = logprobs.get("tokens"), logprobs.get("text_offset")
    if not (isinstance(tokens, list) and isinstance(offsets, list) and tokens and offsets):
        return
    if len(text) <= len(prompt) or not text.startswith(prompt):
        return  # nothing generated (end of text), or a text we cannot line up
    covered = max(int(o) + len(str(t)) for o, t in zip(offsets, tokens, strict=False))
    if covered <= len(prompt):
        raise EchoUnsupported(
            "the echoed log-probabilities do not include the generated token, so they "
            "are misaligned by one position (llama-cpp-python with a model that adds "
            "no BOS token); options are chosen by letter instead"
        )


def chat_content(choice: Json) -> str:
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def completion_tokens(data: Json) -> int:
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else 0


def prompt_tokens(data: Json) -> int | None:
    """The prompt tokens a server reports in ``usage``, or None when it reports none."""
    usage = data.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else None
