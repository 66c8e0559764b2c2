"""Batched log-likelihood and greedy generation over a transformers causal LM.

Both paths share prompt prefixes: the few-shot primer that every request of a
benchmark starts with is run through the model once and its key/value cache reused.

* Log-likelihood: the options of one question share a row. The row holds the
  question's context after the batch's common prefix, then each option; a 4-D
  attention mask keeps each option from seeing the others and the positions of
  each option restart where the context ends, so every option is scored as if it
  followed the context alone, while the context runs once. One forward scores
  ``batch_size`` questions. (Models whose cache we cannot manage, or whose attention
  takes no custom mask, take the plain path: ``batch_size`` pairs per forward, each
  with its whole context.)
* Generation: continuous batching. Up to ``batch_size`` rows decode together in a
  :class:`~quorumbench.backends._kv.SlotCache`; when a row stops (EOS, a stop
  sequence or its token limit) the next prompt is prefilled into its slot, so the
  batch stays full instead of waiting for its longest row.

Decoding is greedy (argmax, first index on ties), hence deterministic.
"""

from __future__ import annotations

import inspect
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from quorumbench.backends._kv import (
    KV,
    SlotCache,
    cache_from_kv,
    crop_kv,
    kv_from_cache,
    supports_fast_path,
)
from quorumbench.backends._prefix import common_prefix_len, fit_prompt
from quorumbench.errors import BackendError
from quorumbench.evaluation.backend import FinishReason
from quorumbench.evaluation.extract import truncate_at_stop
from quorumbench.evaluation.usage import current_usage

MIN_SHARED_PREFIX = 16
"""Shorter shared prefixes are not worth caching."""
PREFIX_CACHE_ENTRIES = 8


@dataclass(frozen=True)
class GenerationSpec:
    """Per-row stopping rules (``ignore_eos``: only the token limit stops) and whether
    the row's prompt may reuse a cached prefix."""

    stop: tuple[str, ...]
    max_new_tokens: int
    ignore_eos: bool = False
    cache_prefix: bool = True


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: list[int]
    finish_reason: FinishReason


@dataclass
class _Row:
    index: int
    spec: GenerationSpec
    tokens: list[int] = field(default_factory=list)


class CausalLM:
    """Runs a loaded causal LM for scoring and generation."""

    def __init__(
        self,
        model: Any,
        *,
        pad_token_id: int,
        eos_token_ids: set[int],
        max_length: int,
        decode: Callable[[list[int]], str],
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.eos_token_ids = eos_token_ids
        self.max_length = max_length
        self._decode = decode
        self._prefixes: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        params = inspect.signature(model.forward).parameters
        self._keep_arg = "logits_to_keep" in params
        self.fast = self._probe_fast_path()
        self.packed = getattr(model.config, "_attn_implementation", None) in PACKING_ATTENTION
        """Whether options may be packed into one row: the attention honours a custom
        4-D mask (flash-attention kernels take only padding masks)."""

    # -- model calls -------------------------------------------------------------

    def _forward(
        self,
        input_ids: torch.Tensor,
        cache: Any,
        *,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {"past_key_values": cache, "use_cache": True}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if last_only and self._keep_arg:
            kwargs["logits_to_keep"] = 1
        logits: torch.Tensor = self.model(input_ids=input_ids, **kwargs).logits
        return logits[:, -1:] if last_only else logits

    def _tensor(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def _probe_fast_path(self) -> bool:
        cache = cache_from_kv(None)
        self._forward(self._tensor([[self.pad_token_id]]), cache, last_only=True)
        return supports_fast_path(cache)

    def _extend(self, base: KV | None, tokens: Sequence[int]) -> tuple[KV, torch.Tensor]:
        """Run ``tokens`` after ``base``; return the grown cache and the last logits."""
        cache = cache_from_kv(base)
        logits = self._forward(self._tensor([tokens]), cache, last_only=True)
        return kv_from_cache(cache), logits[0, -1]

    def prefix(self, tokens: tuple[int, ...]) -> KV:
        """The cache of ``tokens``, reusing the longest cached prefix of them."""
        if tokens in self._prefixes:
            self._prefixes.move_to_end(tokens)
            return self._prefixes[tokens]
        best_len, best = 0, None
        for key, kv in self._prefixes.items():
            shared = common_prefix_len(key, tokens)
            if shared > best_len:
                best_len, best = shared, kv
        base = crop_kv(best, best_len) if best is not None and best_len else None
        kv, _ = self._extend(base, tokens[best_len:]) if tokens[best_len:] else (base or [], None)
        self._prefixes[tokens] = kv
        while len(self._prefixes) > PREFIX_CACHE_ENTRIES:
            self._prefixes.popitem(last=False)
        return kv

    def clear_prefixes(self) -> None:
        self._prefixes.clear()

    # -- log-likelihood ----------------------------------------------------------

    @torch.inference_mode()
    def loglikelihoods(
        self,
        pairs: Sequence[tuple[list[int], list[int]]],
        batch_size: int,
        on_done: Callable[[int], None] = lambda _: None,
    ) -> list[float]:
        """Sum of log-probabilities of each continuation given its context."""
        seqs = [self._fit(ctx, cont) for ctx, cont in pairs]
        usage = current_usage()
        if usage is not None:
            usage.add_prompt_tokens(sum(len(ctx) + len(cont) for ctx, cont in seqs))
        order = sorted(range(len(seqs)), key=lambda i: seqs[i][0] + seqs[i][1])
        out = [0.0] * len(seqs)
        if not (self.fast and self.packed):
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                for i, ll in zip(
                    batch, self._loglikelihood_batch([seqs[i] for i in batch]), strict=True
                ):
                    out[i] = ll
                    on_done(i)
            return out
        groups = _option_groups(order, seqs)
        # rows of similar length together: less padding in each packed batch
        groups.sort(key=lambda g: _row_length(g, seqs))
        for chunk in _packed_chunks(groups, seqs, batch_size):
            packed = self._packed_batch([(seqs[g[0]][0], [seqs[i][1] for i in g]) for g in chunk])
            for group, lls in zip(chunk, packed, strict=True):
                for i, ll in zip(group, lls, strict=True):
                    out[i] = ll
                    on_done(i)
        return out

    def _fit(self, ctx: list[int], cont: list[int]) -> tuple[list[int], list[int]]:
        """Left-truncate to the model's length, keeping the whole continuation."""
        if not cont:
            raise BackendError("an option is empty after tokenization")
        overflow = len(ctx) + len(cont) - self.max_length
        if overflow > 0:
            ctx = ctx[overflow:]
        if not ctx:
            raise BackendError(
                f"an option of {len(cont)} tokens does not fit the model's "
                f"{self.max_length}-token context window"
            )
        return ctx, cont

    def _loglikelihood_batch(self, batch: list[tuple[list[int], list[int]]]) -> list[float]:
        full = [ctx + cont for ctx, cont in batch]
        # Logits are needed from the last context token on, so the shared prefix must
        # stop before the shortest context ends.
        shared = min(len(ctx) for ctx, _ in batch) - 1
        for seq in full[1:]:
            shared = min(shared, common_prefix_len(full[0], seq))
        if not self.fast or shared < MIN_SHARED_PREFIX:
            shared = 0
        base = self.prefix(tuple(full[0][:shared])) if shared else None
        suffixes = [seq[shared:] for seq in full]
        width = max(len(s) for s in suffixes)
        ids = self._tensor([s + [self.pad_token_id] * (width - len(s)) for s in suffixes])
        logits = self._forward(ids, cache_from_kv(base, len(batch)))
        results = []
        for row, (ctx, cont) in enumerate(batch):
            first = len(ctx) - 1 - shared
            rows = logits[row, first : first + len(cont)].float()
            logprobs = torch.log_softmax(rows, dim=-1)
            target = torch.tensor(cont, device=logprobs.device).unsqueeze(1)
            results.append(float(logprobs.gather(1, target).sum().item()))
        return results

    def _packed_batch(self, groups: list[tuple[list[int], list[list[int]]]]) -> list[list[float]]:
        """Log-likelihoods of each group's continuations, one row per group.

        A row is the group's context after the batch's shared prefix, then every
        continuation one after the other. The attention mask lets each continuation
        see the prefix, the context and its own earlier tokens, never another
        continuation, and its positions restart where the context ends: each
        continuation is scored as if it followed the context alone (as
        lm-evaluation-harness scores it, one forward per option), while the context
        runs once per question and one forward serves ``len(groups)`` questions.
        """
        shared = min(len(ctx) for ctx, _ in groups) - 1  # the last context token runs
        for ctx, _ in groups[1:]:
            shared = min(shared, common_prefix_len(groups[0][0], ctx))
        if shared < MIN_SHARED_PREFIX:
            shared = 0
        base = self.prefix(tuple(groups[0][0][:shared])) if shared else None
        rows: list[list[int]] = []
        positions: list[list[int]] = []
        starts: list[list[int]] = []
        for ctx, conts in groups:
            row, pos, row_starts = ctx[shared:], list(range(shared, len(ctx))), []
            for cont in conts:
                row_starts.append(len(row))
                row = row + cont
                pos += range(len(ctx), len(ctx) + len(cont))
            rows.append(row)
            positions.append(pos)
            starts.append(row_starts)
        width = max(len(row) for row in rows)
        dtype = next(self.model.parameters()).dtype
        blocked = torch.finfo(dtype).min
        mask = torch.full((len(rows), 1, width, shared + width), blocked, dtype=dtype)
        mask[:, :, :, :shared] = 0  # every token sees the shared prefix
        causal = torch.triu(torch.full((width, width), blocked, dtype=dtype), diagonal=1)
        for b, (ctx, conts) in enumerate(groups):
            own = len(ctx) - shared
            mask[b, 0, :own, shared : shared + own] = causal[:own, :own]
            for begin, cont in zip(starts[b], conts, strict=True):
                end = begin + len(cont)
                mask[b, 0, begin:end, shared : shared + own] = 0
                mask[b, 0, begin:end, shared + begin : shared + end] = causal[
                    : len(cont), : len(cont)
                ]
            pads = torch.arange(len(rows[b]), width)  # padding sees itself: no empty row
            mask[b, 0, pads, shared + pads] = 0
        ids = self._tensor([row + [self.pad_token_id] * (width - len(row)) for row in rows])
        position_ids = self._tensor([pos + [0] * (width - len(pos)) for pos in positions])
        logits = self._forward(
            ids,
            cache_from_kv(base, len(rows)),
            attention_mask=mask.to(self.device),
            position_ids=position_ids,
        )
        results = []
        for b, (ctx, conts) in enumerate(groups):
            own = len(ctx) - shared
            lls = []
            for begin, cont in zip(starts[b], conts, strict=True):
                # the last context token predicts the first token, then each the next
                index = [own - 1, *range(begin, begin + len(cont) - 1)]
                logprobs = torch.log_softmax(logits[b, index].float(), dim=-1)
                target = torch.tensor(cont, device=logprobs.device).unsqueeze(1)
                lls.append(float(logprobs.gather(1, target).sum().item()))
            results.append(lls)
        return results

    # -- generation --------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[list[int]],
        specs: Sequence[GenerationSpec],
        batch_size: int,
        on_done: Callable[[int], None] = lambda _: None,
    ) -> list[Generation]:
        """Greedy continuations of ``prompts``, one :class:`Generation` each."""
        prompts = [
            self._fit_prompt(p, s.max_new_tokens) for p, s in zip(prompts, specs, strict=True)
        ]
        results: list[Generation | None] = [None] * len(prompts)
        if not prompts:
            return []
        if not self.fast:
            return self._generate_fallback(prompts, specs, batch_size, on_done)
        shared = len(prompts[0]) if len(prompts) == 1 else 0
        if len(prompts) > 1:
            shared = common_prefix_len(min(prompts), max(prompts))
        queue = deque(range(len(prompts)))
        longest = max(len(p) for p in prompts)
        slots: SlotCache | None = None
        rows: list[_Row | None] = []
        usage = current_usage()
        prefill_s = 0.0  # time spent in prefills, kept out of the decode time

        def admit(slot: int) -> bool:
            """Prefill the next queued prompt into ``slot``; False if it finished at once."""
            nonlocal slots, prefill_s
            started = time.perf_counter()
            index = queue.popleft()
            prompt = prompts[index]
            cut = min(shared, len(prompt) - 1)
            cached = cut >= MIN_SHARED_PREFIX and specs[index].cache_prefix
            base = self.prefix(tuple(prompt[:cut])) if cached else None
            kv, last = self._extend(base, prompt[cut:] if base else prompt)
            row = _Row(index, specs[index])
            if slots is None:
                capacity = longest + max(s.max_new_tokens for s in specs) + 1
                slots = SlotCache(kv, min(batch_size, len(prompts)), capacity, longest)
            slots.place(slot, kv)
            first = int(torch.argmax(last).item())
            took = time.perf_counter() - started
            prefill_s += took
            if usage is not None:
                usage.add_first_token(took)
                usage.add_prompt_tokens(len(prompt))
            if self._append(row, first, results, on_done):
                return False
            rows[slot] = row
            return True

        rows = [None] * min(batch_size, len(prompts))
        for slot in range(len(rows)):
            while queue and not admit(slot):
                pass
        while True:
            active = [i for i, r in enumerate(rows) if r is not None]
            if not active:
                break
            step_started, prefill_before = time.perf_counter(), prefill_s
            assert slots is not None
            if len(active) < slots.slots:
                slots.keep(active)
                rows = [rows[i] for i in active]
            last = self._tensor([[r.tokens[-1]] for r in rows if r is not None])
            cache, mask, positions = slots.step_cache()
            logits = self._forward(last, cache, attention_mask=mask, position_ids=positions)
            slots.advance()
            chosen = torch.argmax(logits[:, -1], dim=-1).tolist()
            for slot, token in enumerate(chosen):
                row = rows[slot]
                assert row is not None
                if self._append(row, token, results, on_done):
                    rows[slot] = None
                    while queue and not admit(slot):
                        pass
            if slots.length + 1 >= slots.capacity:
                slots.compact(longest)
            if usage is not None:
                step_s = time.perf_counter() - step_started - (prefill_s - prefill_before)
                usage.add_decode(step_s)
        return [r for r in results if r is not None]

    def _fit_prompt(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        return fit_prompt(prompt, max_new_tokens, self.max_length)

    def _append(
        self,
        row: _Row,
        token: int,
        results: list[Generation | None],
        on_done: Callable[[int], None],
    ) -> bool:
        """Add one token to ``row``; store its result and return True when it is done."""
        reason: FinishReason | None = None
        if token in self.eos_token_ids and not row.spec.ignore_eos:
            reason = "eos"
        else:
            row.tokens.append(token)
        text = self._decode(row.tokens)
        text, stopped = truncate_at_stop(text, row.spec.stop)
        if stopped:
            reason = "stop"
        elif reason is None and len(row.tokens) >= row.spec.max_new_tokens:
            reason = "length"
        if reason is None:
            return False
        results[row.index] = Generation(text, row.tokens, reason)
        on_done(row.index)
        return True

    def _generate_fallback(
        self,
        prompts: Sequence[list[int]],
        specs: Sequence[GenerationSpec],
        batch_size: int,
        on_done: Callable[[int], None],
    ) -> list[Generation]:
        """Static, length-sorted, left-padded batches for models whose cache layout
        the continuous path does not handle (sliding-window or hybrid layers)."""
        results: list[Generation | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        usage = current_usage()
        for start in range(0, len(order), batch_size):
            started = time.perf_counter()
            batch = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in batch)
            ids = self._tensor(
                [[self.pad_token_id] * (width - len(prompts[i])) + prompts[i] for i in batch]
            )
            mask = self._tensor(
                [[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in batch]
            )
            rows = {i: _Row(i, specs[i]) for i in batch}
            done: set[int] = set()
            cache = cache_from_kv(None)
            start_positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            logits = self._forward(
                ids, cache, attention_mask=mask, position_ids=start_positions, last_only=True
            )
            positions = mask.sum(dim=1, keepdim=True)
            first_at: float | None = None
            while True:
                chosen = torch.argmax(logits[:, -1], dim=-1).tolist()
                if first_at is None:
                    first_at = time.perf_counter()
                    if usage is not None:
                        usage.add_first_token(first_at - started)
                        usage.add_prompt_tokens(sum(len(prompts[i]) for i in batch))
                for i, token in zip(batch, chosen, strict=True):
                    if i not in done and self._append(rows[i], token, results, on_done):
                        done.add(i)
                if len(done) == len(batch):
                    break
                step = self._tensor(
                    [[rows[i].tokens[-1] if rows[i].tokens else self.pad_token_id] for i in batch]
                )
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                logits = self._forward(step, cache, attention_mask=mask, position_ids=positions)
                positions = positions + 1
            if usage is not None and first_at is not None:
                usage.add_decode(time.perf_counter() - first_at)
        return [r for r in results if r is not None]


PACKING_ATTENTION = frozenset({"sdpa", "eager"})
"""Attention implementations that apply a custom 4-D mask as given."""
MAX_PACKED_TOKENS = 512
"""Continuation tokens one packed row may hold; a question with more is split."""
MAX_MASK_ELEMENTS = 1 << 25
"""A packed batch's attention mask (rows × width × (prefix + width)) stays under this
many elements (128 MiB in float32): long rows go fewer to a batch."""


def _option_groups(
    order: list[int], seqs: Sequence[tuple[list[int], list[int]]]
) -> list[list[int]]:
    """Pair indices in ``order`` grouped by context: consecutive pairs with the same
    context tokens (a question's options), split where a group's continuations would
    pass :data:`MAX_PACKED_TOKENS`. Partial scoring (one context per option) gives
    groups of one."""
    groups: list[list[int]] = []
    size = 0
    for i in order:
        ctx, cont = seqs[i]
        if groups and seqs[groups[-1][0]][0] == ctx and size + len(cont) <= MAX_PACKED_TOKENS:
            groups[-1].append(i)
            size += len(cont)
        else:
            groups.append([i])
            size = len(cont)
    return groups


def _row_length(group: list[int], seqs: Sequence[tuple[list[int], list[int]]]) -> int:
    """A packed row's length before its shared prefix is cut: the context and every
    continuation of ``group``."""
    return len(seqs[group[0]][0]) + sum(len(seqs[i][1]) for i in group)


def _packed_chunks(
    groups: list[list[int]], seqs: Sequence[tuple[list[int], list[int]]], batch_size: int
) -> list[list[list[int]]]:
    """``groups`` (sorted by row length) cut into batches of at most ``batch_size``
    rows whose mask stays under :data:`MAX_MASK_ELEMENTS` (a row alone always goes)."""
    chunks: list[list[list[int]]] = []
    for group in groups:
        length = _row_length(group, seqs)
        rows = len(chunks[-1]) + 1 if chunks else 0
        if chunks and rows <= batch_size and rows * length * length <= MAX_MASK_ELEMENTS:
            chunks[-1].append(group)
            continue
        chunks.append([group])
    return chunks
