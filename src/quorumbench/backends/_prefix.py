"""Prompt tokens both engines share rules for: cached prefixes, and fitting a window."""

from __future__ import annotations

from collections.abc import Sequence

from quorumbench.errors import BackendError


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def fit_prompt(prompt: list[int], max_new_tokens: int, window: int) -> list[int]:
    """``prompt`` without its oldest tokens where it and ``max_new_tokens`` would not fit
    a ``window``-token context; BackendError when the generation alone would not."""
    room = window - max_new_tokens
    if room < 1:
        raise BackendError(
            f"max_new_tokens={max_new_tokens} leaves no room for the prompt in the "
            f"model's {window}-token context window"
        )
    return prompt[-room:] if len(prompt) > room else prompt
