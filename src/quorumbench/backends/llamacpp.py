"""GGUF models on llama.cpp, in process: the format's own engine, quantized as shipped.

transformers de-quantizes a GGUF file into float32 (``backends/gguf.py``): a 7B Q4
model becomes 28 GB, and a CPU decodes it several times slower than llama.cpp runs the
file itself (SmolLM2-135M Q4_1 on two cores, batch 1: about 100 tokens/s here against
16 through transformers; ``design/0003-gguf-on-llama-cpp.md``). This backend loads the
file with llama.cpp's C API (``backends/_llama_lib.py``, the prebuilt library of the
``xllamacpp`` wheel) and drives its decoder directly:

* Generation: greedy (argmax of the last position's logits, first index on ties),
  until EOS, a stop sequence (the text is cut at the first one, as the transformers
  path cuts it) or ``max_new_tokens``. Prompts with a short shared prefix decode
  ``batch_size`` at a time, each in a sequence of its own (``backends/_llama_batch.py``);
  others one at a time, reusing the shared primer's KV cache. Both give the same
  outputs.
* Calls to llama_decode are cut at multiples of ``BATCH_TOKENS`` counted from position
  0, and only whole cached chunks are reused: llama.cpp picks its kernels by a call's
  size, so the same tokens decoded in other chunks give slightly other numbers (a
  cached few-shot primer reused at any length once changed one arith answer in five),
  and a result must not depend on what a runner decoded before.
* Log-likelihood: the context is prefilled once per question (its KV cache is kept
  for every option of the question, its whole chunks for the next question), then
  each continuation is decoded with logits at every position and its tokens'
  log-softmax summed.
* Tokens are what the transformers path uses: plain text without special tokens, chat
  messages through the chat template stored in the GGUF (Jinja, rendered as
  transformers renders it), a (context, continuation) pair split as lm-evaluation-
  harness splits it.

Its figures differ from the transformers path by what quantized kernels change (a
fraction of a nat per option, measured in ``tests/integration/test_llamacpp_backend.py``),
which is why a result records its engine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from quorumbench.backends._llama_batch import BatchedGenerator
from quorumbench.backends._llama_lib import XLLAMACPP_VERSION, LlamaModel
from quorumbench.backends._plugin import BackendOptions
from quorumbench.backends._prefix import common_prefix_len, fit_prompt
from quorumbench.errors import BackendError, ModelLoadError
from quorumbench.evaluation.backend import (
    ChoiceRequest,
    ChoiceResult,
    FinishReason,
    GenerateRequest,
    GenerateResult,
    ModelBackend,
    ModelInfo,
    Progress,
    Prompt,
    no_progress,
)
from quorumbench.evaluation.extract import truncate_at_stop
from quorumbench.evaluation.refs import ModelRef
from quorumbench.evaluation.usage import current_usage

ENGINE = "llama.cpp"
MAX_CONTEXT = 4096
"""Tokens of context the backend allocates (the model's own window when smaller): a
task's longest prompt plus its generation fits (GSM8K's eight shots and 256 tokens,
HumanEval's 1,024), and the KV cache of a 7B model stays near 2 GB."""
BATCH_TOKENS = 128
"""Tokens per llama_decode call when prefilling, and the grain of prefix reuse: on two
cores 128-token calls decode as fast as 512-token ones (1.59 s against 1.57 s for 512
tokens), 64-token ones 25% slower."""


def load_llamacpp_backend(ref: ModelRef, options: BackendOptions) -> ModelBackend:
    """Load the GGUF file of a ``gguf:`` ref (a local file or a pinned Hub file)."""
    from quorumbench.backends.gguf import locate_gguf

    path, digest = locate_gguf(ref, options)
    pinned = ModelRef("gguf", str(path), digest) if ref.is_local else ref.with_revision(digest)
    return LlamaCppBackend.load(path, pinned, digest, threads=options.threads)


class LlamaCppBackend:
    """A GGUF model loaded by llama.cpp, answering generation and choice requests."""

    def __init__(self, llama: LlamaModel, info: ModelInfo) -> None:
        self._llama = llama
        self._info = info
        self._vocab = llama.n_vocab
        self._eos = {llama.eos}
        eot = _metadata_int(llama, "tokenizer.ggml.eot_token_id")
        if eot is not None:
            self._eos.add(eot)
        self._template = llama.metadata("tokenizer.chat_template")
        self._cached: list[int] = []
        """The tokens whose keys and values the context holds, in order."""
        self._whole = 0
        """How many leading cached tokens were decoded as whole ``n_batch`` chunks."""
        self._head: list[int] | None = None
        """The context (but its last token) of the question being scored, kept for each
        of its options; None when the context holds anything else."""
        self._batched = BatchedGenerator(llama, eos=self._eos, text=self._text)

    @classmethod
    def load(
        cls,
        path: Path,
        ref: ModelRef,
        revision: str,
        *,
        threads: int | None = None,
        lora: Path | None = None,
        details: dict[str, str] | None = None,
    ) -> LlamaCppBackend:
        """Load the GGUF file ``path``, with the GGUF LoRA file ``lora`` applied;
        ``details`` go into the model's info beside the engine's."""
        threads = threads or default_threads()
        llama = LlamaModel(
            path, n_ctx=MAX_CONTEXT, n_batch=BATCH_TOKENS, threads=threads, lora=lora
        )
        info = ModelInfo(
            ref=ref.canonical(),
            backend="llamacpp",
            revision=revision,
            is_chat=llama.metadata("tokenizer.chat_template") is not None,
            device="cpu",
            dtype=_file_type(llama),
            details={"engine": ENGINE, "xllamacpp": XLLAMACPP_VERSION, **(details or {})},
        )
        return cls(llama, info)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def context_tokens(self) -> int:
        return self._llama.n_ctx

    # -- tokens ---------------------------------------------------------------------

    def _tokens(self, text: str, *, special: bool = False) -> list[int]:
        if not text:
            return []
        return self._llama.tokenize(text.encode("utf-8"), special=special)

    def _text(self, tokens: Sequence[int]) -> str:
        return self._llama.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def count_tokens(self, text: str) -> int:
        return len(self._tokens(text))

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: plain text as is, messages through the chat template."""
        if prompt.text is not None:
            return self._tokens(prompt.text)
        if self._template is None:
            raise ModelLoadError(f"{self._info.ref} has no chat template for a chat prompt")
        from jinja2 import TemplateError

        llama = self._llama
        try:
            rendered = render_chat_template(
                self._template,
                [{"role": m.role, "content": m.content} for m in prompt.messages or ()],
                bos_token=self._text([llama.bos]) if llama.bos >= 0 else "",
                eos_token=self._text([llama.eos]) if llama.eos >= 0 else "",
            )
        except TemplateError as exc:
            raise BackendError(f"{self._info.ref}'s chat template failed: {exc}") from exc
        return self._tokens(rendered, special=True)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context, continuation) tokens split as lm-evaluation-harness splits them
        (``backends/hf.py`` ``encode_pair``, with this model's own tokenizer)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            continuation = context[-spaces:] + continuation
            context = context[:-spaces]
        whole = self._tokens(context + continuation)
        if not context:
            return [self._llama.eos], whole
        ctx = self._tokens(context)
        return ctx, whole[len(ctx) :]

    # -- the decoder ----------------------------------------------------------------

    def _reuse(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` the context may keep: a cached prefix, cut at a
        chunk boundary and made of whole chunks only (:meth:`_decode`), so the rest is
        decoded in exactly the calls a cold start would make."""
        keep = min(common_prefix_len(self._cached, tokens), self._whole)
        return keep - keep % self._llama.n_batch

    def _decode(self, tokens: list[int], at: int, *, all_logits: bool) -> Any:
        """Decode ``tokens`` at positions ``at``…; the logits of every one of them
        (``all_logits``, a tokens × vocabulary array) or of the last one only.

        Calls are cut at multiples of ``n_batch`` counted from position 0, so a token is
        decoded in the same call, with the same neighbours, however the tokens before it
        were reached: llama.cpp picks its kernels by a call's size, and a result must
        not depend on what a runner decoded before. ``_whole`` counts the leading
        tokens decoded as whole chunks, the only ones :meth:`_reuse` keeps."""
        llama = self._llama
        if at + len(tokens) > self.context_tokens:
            raise BackendError(
                f"{at + len(tokens)} tokens do not fit the {self.context_tokens}-token context"
            )
        llama.forget_from(at)
        del self._cached[at:]
        step = llama.n_batch  # at most what one llama_decode call may take
        self._whole = min(self._whole, at - at % step)
        rows = []
        pointer = None
        start, end = at, at + len(tokens)
        while start < end:
            stop = min(end, (start // step + 1) * step)
            chunk = tokens[start - at : stop - at]
            pointer = llama.decode(chunk, start, all_logits=all_logits)
            self._cached.extend(chunk)
            if start == self._whole and stop - start == step:
                self._whole = stop
            if all_logits:
                rows.append(np.ctypeslib.as_array(pointer, shape=(len(chunk), self._vocab)).copy())
            start = stop
        if all_logits:
            return np.concatenate(rows)
        return np.ctypeslib.as_array(pointer, shape=(1, self._vocab))[0]

    # -- requests -------------------------------------------------------------------

    def generate(
        self,
        requests: Sequence[GenerateRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[GenerateResult]:
        """Greedy generation: ``batch_size`` requests at a time in sequences of their
        own (``backends/_llama_batch.py``) when their prompts share less than one chunk,
        else one at a time on the shared primer's cached chunks: the same outputs."""
        if batch_size > 1 and len(requests) > 1:
            prompts = [
                fit_prompt(self.encode_prompt(r.prompt), r.max_new_tokens, self.context_tokens)
                for r in requests
            ]
            # a long shared primer is decoded once one at a time (a few-shot task's
            # prompts: prefilling is slow here, about 270 tokens/s on two cores), a
            # short one in parallel sequences (chat prompts, long generations)
            if common_prefix_len(min(prompts), max(prompts)) < self._llama.n_batch:
                slots = min(batch_size, len(requests))
                return self._batched.generate(requests, prompts, slots, progress)
        results = []
        for request in requests:
            results.append(self._generate_one(request))
            progress(1)
        return results

    def _generate_one(self, request: GenerateRequest) -> GenerateResult:
        usage = current_usage()
        prompt = fit_prompt(
            self.encode_prompt(request.prompt), request.max_new_tokens, self.context_tokens
        )
        started = time.perf_counter()
        self._head = None
        prompt = prompt or [self._llama.eos]
        keep = self._reuse(prompt[:-1])  # the last token is decoded again: its logits
        logits = self._decode(prompt[keep:], keep, all_logits=False)
        first_at = time.perf_counter()
        if usage is not None:
            usage.add_prompt_tokens(len(prompt))
            usage.add_first_token(first_at - started)
        tokens: list[int] = []
        reason: FinishReason | None = None
        while reason is None:
            token = int(logits.argmax())
            if token in self._eos and not request.ignore_eos:
                reason = "eos"
                break
            tokens.append(token)
            if truncate_at_stop(self._text(tokens), request.stop)[1]:
                reason = "stop"
            elif len(tokens) >= request.max_new_tokens:
                reason = "length"
            else:
                logits = self._decode([token], len(self._cached), all_logits=False)
        if usage is not None:
            usage.add_decode(time.perf_counter() - first_at)
        text = truncate_at_stop(self._text(tokens), request.stop)[0]
        return GenerateResult(text, len(tokens), reason)

    def choose(
        self,
        requests: Sequence[ChoiceRequest],
        *,
        batch_size: int,
        progress: Progress = no_progress,
    ) -> list[ChoiceResult]:
        """Each option's summed log-probability after the context (``batch_size`` is
        not used)."""
        results = []
        for request in requests:
            lls = []
            scored = 0
            for continuation in request.continuations:
                context, tokens = self.encode_pair(request.context, continuation)
                lls.append(self._loglikelihood(context, tokens))
                scored += len(tokens)
            results.append(ChoiceResult("loglikelihood", tuple(lls), n_tokens=scored))
            progress(1)
        return results

    def _loglikelihood(self, context: list[int], continuation: list[int]) -> float:
        if not continuation:
            return 0.0
        room = self.context_tokens - len(continuation)
        if room < 1:
            raise BackendError(
                f"a {len(continuation)}-token continuation does not fit the "
                f"{self.context_tokens}-token context"
            )
        context = context[-room:]
        usage = current_usage()
        if usage is not None:
            usage.add_prompt_tokens(len(context) + len(continuation))
        # The context's last token predicts the continuation's first: the context but
        # its last token is decoded once for all of a question's options (on the whole
        # chunks it shares with the previous question), the rest with logits.
        head = context[:-1]
        if head != self._head:
            self._head = None
            keep = self._reuse(head)
            if keep < len(head):
                self._decode(head[keep:], keep, all_logits=False)
            self._head = head
        logits = self._decode([context[-1], *continuation[:-1]], len(head), all_logits=True)
        logits = logits.astype(np.float64)
        peak = logits.max(axis=1, keepdims=True)
        log_norm = peak[:, 0] + np.log(np.exp(logits - peak).sum(axis=1))
        picked = logits[np.arange(len(continuation)), continuation]
        return float((picked - log_norm).sum())

    def close(self) -> None:
        self._cached.clear()
        self._batched.close()
        self._llama.close()


def default_threads() -> int:
    """``OMP_NUM_THREADS`` when set (as torch reads it: a runner's worker gets its share
    of the cores there, ``runner/sandbox.py``), else every core this process may use.

    More threads than free cores is ruinous here: llama.cpp's threads spin at a barrier
    several hundred times per token, so one descheduled thread stalls the others for a
    scheduler slice each time (three demo runners of two threads each on two cores
    decoded a few tokens per second, measured)."""
    try:
        wanted = int(os.environ.get("OMP_NUM_THREADS") or 0)
    except ValueError:
        wanted = 0
    return wanted if wanted > 0 else len(os.sched_getaffinity(0)) or 1


def render_chat_template(
    template: str, messages: list[dict[str, str]], *, bos_token: str, eos_token: str
) -> str:
    """A chat template rendered as transformers renders it (``apply_chat_template``:
    a sandboxed Jinja environment with ``trim_blocks``, ``lstrip_blocks``, loop
    controls, ``raise_exception``, ``strftime_now`` and ``tojson``), ending with the
    generation prompt. ``strftime_now`` reads UTC, so runners in other time zones
    render the same prompt."""
    rendered = _compiled(template).render(
        messages=messages, bos_token=bos_token, eos_token=eos_token, add_generation_prompt=True
    )
    return str(rendered)


@cache
def _compiled(template: str) -> Any:
    import json

    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, **kw: Any) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now(UTC).strftime(fmt)
    return env.from_string(template)


def _metadata_int(llama: LlamaModel, key: str) -> int | None:
    value = llama.metadata(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


_FILE_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1"}


def _file_type(llama: LlamaModel) -> str:
    """The GGUF's quantization as llama.cpp names it (``general.file_type``)."""
    code = _metadata_int(llama, "general.file_type")
    if code is None:
        return "gguf"
    return _FILE_TYPES.get(code, f"gguf-type-{code}")
