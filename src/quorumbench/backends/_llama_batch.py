"""Greedy generation of several requests at once on llama.cpp (continuous batching).

Each request gets a sequence of its own in a context of ``slots`` sequences (one KV
stream each, ``_llama_lib.LlamaContext``); every step decodes the next token of every
running sequence in one ``llama_decode`` call, and a finished sequence's slot takes the
next waiting request at once. Where a step of several sequences costs about what one
costs, a task costs about its longest sample instead of the sum of its samples (a 135M
model on one 2-core machine, 2026-12-06; on a slower one on 2026-12-07 a step cost
about as much as its sequences one at a time: ``design/0003-gguf-on-llama-cpp.md``).

The outputs are those of one request at a time: a sequence's logits do not depend on
what else is in the batch (separate KV streams; llama.cpp computes each row's dot
products on its own; no flash attention, whose CPU kernel does not:
``_llama_lib.FLASH_ATTN_DISABLED``), checked bit for bit by ``tests/integration/
test_llamacpp_backend.py``, and the stopping rules are the one-at-a-time path's
(``backends/llamacpp.py``), token for token.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quorumbench.backends._llama_lib import LlamaContext, LlamaModel
from quorumbench.evaluation.backend import FinishReason, GenerateRequest, GenerateResult, Progress
from quorumbench.evaluation.extract import truncate_at_stop
from quorumbench.evaluation.usage import current_usage

CONTEXT_STEP = 256
"""A sequence's room is rounded up to this many tokens (contexts are reused)."""


@dataclass
class _Sequence:
    index: int
    request: GenerateRequest
    position: int
    """Where the next token goes."""
    tokens: list[int] = field(default_factory=list)
    reason: FinishReason | None = None


class BatchedGenerator:
    """Generates on a context of several sequences, made (and grown) on demand."""

    def __init__(
        self,
        llama: LlamaModel,
        *,
        eos: set[int],
        text: Callable[[Sequence[int]], str],
    ) -> None:
        self._llama = llama
        self._eos = eos
        self._text = text
        self._chunk = llama.n_batch
        """Prompt tokens per decode call: the main context's, so a prompt is decoded in
        the same calls (the same kernels, the same numbers) on either path."""
        self._context: LlamaContext | None = None

    def _context_for(self, slots: int, room: int) -> LlamaContext:
        room = -(-room // CONTEXT_STEP) * CONTEXT_STEP
        ctx = self._context
        if ctx is None or ctx.n_seq < slots or ctx.n_ctx // ctx.n_seq < room:
            self.close()
            ctx = self._context = self._llama.context(
                n_ctx=slots * room, n_seq=slots, n_batch=max(self._chunk, slots)
            )
        return ctx

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        prompts: Sequence[list[int]],
        slots: int,
        progress: Progress,
    ) -> list[GenerateResult]:
        """Greedy continuations of ``prompts`` (fitted to the model's window)."""
        room = max(len(p) + r.max_new_tokens for p, r in zip(prompts, requests, strict=True))
        ctx = self._context_for(slots, min(room, self._llama.window))
        waiting = deque(range(len(requests)))
        results: list[GenerateResult | None] = [None] * len(requests)
        running: dict[int, _Sequence] = {}
        """Sequences by their seq id, each with a token to decode next."""
        usage = current_usage()
        vocab = self._llama.n_vocab

        def finish(seq_id: int, seq: _Sequence) -> None:
            assert seq.reason is not None
            text = truncate_at_stop(self._text(seq.tokens), seq.request.stop)[0]
            results[seq.index] = GenerateResult(text, len(seq.tokens), seq.reason)
            ctx.forget(seq_id)
            progress(1)

        def admit(seq_id: int) -> None:
            """Start the next waiting request in ``seq_id`` (until one keeps going)."""
            while waiting:
                index = waiting.popleft()
                prompt = prompts[index] or [self._llama.eos]
                started = time.perf_counter()
                pointer = None
                for at in range(0, len(prompt), self._chunk):
                    chunk = prompt[at : at + self._chunk]
                    last = at + len(chunk) == len(prompt)
                    items = [
                        (t, at + i, seq_id, last and i == len(chunk) - 1)
                        for i, t in enumerate(chunk)
                    ]
                    pointer = ctx.decode(items)
                if usage is not None:
                    usage.add_first_token(time.perf_counter() - started)
                    usage.add_prompt_tokens(len(prompt))
                seq = _Sequence(index, requests[index], len(prompt))
                logits = np.ctypeslib.as_array(pointer, shape=(1, vocab))[0]
                if self._take(seq, logits):
                    finish(seq_id, seq)
                    continue
                running[seq_id] = seq
                return

        for seq_id in range(slots):
            admit(seq_id)
        while running:
            started = time.perf_counter()
            order = list(running)
            items = [(running[s].tokens[-1], running[s].position, s, True) for s in order]
            pointer = ctx.decode(items)
            rows = np.ctypeslib.as_array(pointer, shape=(len(order), vocab))
            if usage is not None:
                usage.add_decode(time.perf_counter() - started)
            for row, seq_id in enumerate(order):
                seq = running[seq_id]
                seq.position += 1
                if self._take(seq, rows[row]):
                    del running[seq_id]
                    finish(seq_id, seq)
                    admit(seq_id)
        return [r for r in results if r is not None]

    def _take(self, seq: _Sequence, logits: Any) -> bool:
        """Append the greedy token (as ``LlamaCppBackend._generate_one`` does); whether
        the sequence is done."""
        request = seq.request
        token = int(logits.argmax())
        if token in self._eos and not request.ignore_eos:
            seq.reason = "eos"
            return True
        seq.tokens.append(token)
        if truncate_at_stop(self._text(seq.tokens), request.stop)[1]:
            seq.reason = "stop"
        elif len(seq.tokens) >= request.max_new_tokens:
            seq.reason = "length"
        return seq.reason is not None

    def close(self) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None
