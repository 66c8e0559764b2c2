"""The JSON-lines protocol between the runner and its sandboxed worker.

One JSON object per line. The runner sends an operation, the worker answers with
zero or more ``{"event": "progress", "n": k}`` lines and then one ``done`` (with a
``value``) or ``error`` (with ``type`` and ``message``) line:

```
→ {"op": "load", "model": {LocalModel}, "options": {...}}   ← done: ModelInfo
→ {"op": "convert", "gguf": path, "digest": sha256, "out": dir}   ← done: null
→ {"op": "generate", "requests": [...], "batch_size": n}    ← progress…, done: [results]
→ {"op": "choose", "requests": [...], "batch_size": n}      ← progress…, done: [results]
→ {"op": "count_tokens", "text": "..."}                     ← done: int
```

The worker runs untrusted model code, so everything it sends is checked here before
the runner uses it: a wrong type or shape is a :class:`SandboxError`, never a crash
of the runner. The runner scores the outputs itself; the worker never sees the
benchmark's answers.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar, get_args

from quorumbench.errors import SandboxError
from quorumbench.evaluation.backend import (
    ChatMessage,
    ChoiceMethod,
    ChoiceRequest,
    ChoiceResult,
    FinishReason,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Prompt,
)

MAX_LINE_BYTES = 64 << 20
"""The longest line the runner reads from a worker (a longer one kills the worker)."""

T = TypeVar("T")


def _check(value: Any, kind: type[T], what: str) -> T:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SandboxError(f"the sandboxed worker sent a bad {what}: {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SandboxError(f"the sandboxed worker sent a bad score: {type(value).__name__}")
    return float(value)


# -- requests (runner → worker; the worker trusts the runner) ----------------------


def encode_generate(request: GenerateRequest) -> dict[str, Any]:
    prompt = request.prompt
    messages = None
    if prompt.messages is not None:
        messages = [[m.role, m.content] for m in prompt.messages]
    return {
        "text": prompt.text,
        "messages": messages,
        "stop": list(request.stop),
        "max_new_tokens": request.max_new_tokens,
        "ignore_eos": request.ignore_eos,
        "cache_prefix": request.cache_prefix,
    }


def decode_generate(data: dict[str, Any]) -> GenerateRequest:
    messages = data.get("messages")
    prompt = Prompt(
        text=data.get("text"),
        messages=None
        if messages is None
        else tuple(ChatMessage(role, content) for role, content in messages),
    )
    return GenerateRequest(
        prompt,
        tuple(data["stop"]),
        int(data["max_new_tokens"]),
        ignore_eos=bool(data.get("ignore_eos", False)),
        cache_prefix=bool(data.get("cache_prefix", True)),
    )


def encode_choice(request: ChoiceRequest) -> dict[str, Any]:
    return {
        "context": request.context,
        "continuations": list(request.continuations),
        "question": request.question,
        "options": list(request.options),
        "letter_order": list(request.letter_order),
    }


def decode_choice(data: dict[str, Any]) -> ChoiceRequest:
    return ChoiceRequest(
        data["context"],
        tuple(data["continuations"]),
        data["question"],
        tuple(data["options"]),
        tuple(int(i) for i in data["letter_order"]),
    )


# -- results (worker → runner; checked) --------------------------------------------


def encode_generate_result(result: GenerateResult) -> dict[str, Any]:
    return {"text": result.text, "n_tokens": result.n_tokens, "finish": result.finish_reason}


def encode_choice_result(result: ChoiceResult) -> dict[str, Any]:
    return {
        "method": result.method,
        "loglikelihoods": list(result.loglikelihoods),
        "chosen": result.chosen,
        "raw_text": result.raw_text,
        "n_tokens": result.n_tokens,
    }


def _results(value: Any, expected: int) -> list[dict[str, Any]]:
    items = _check(value, list, "result list")
    if len(items) != expected:
        raise SandboxError(
            f"the sandboxed worker answered {len(items)} results for {expected} requests"
        )
    return [_check(item, dict, "result") for item in items]


def decode_generate_results(value: Any, expected: int) -> list[GenerateResult]:
    out = []
    for item in _results(value, expected):
        finish: FinishReason = item.get("finish")  # type: ignore[assignment]
        if finish not in get_args(FinishReason):
            raise SandboxError(f"the sandboxed worker sent a bad finish reason {finish!r}")
        n_tokens = _check(item.get("n_tokens"), int, "token count")
        out.append(GenerateResult(_check(item.get("text"), str, "text"), n_tokens, finish))
    return out


def decode_choice_results(value: Any, expected: int) -> list[ChoiceResult]:
    out = []
    for item in _results(value, expected):
        method: ChoiceMethod = item.get("method")  # type: ignore[assignment]
        if method not in get_args(ChoiceMethod):
            raise SandboxError(f"the sandboxed worker sent a bad choice method {method!r}")
        lls = tuple(_number(v) for v in _check(item.get("loglikelihoods"), list, "scores"))
        if any(math.isnan(v) for v in lls):
            raise SandboxError("the sandboxed worker sent a NaN log-likelihood")
        chosen = item.get("chosen")
        if chosen is not None:
            chosen = _check(chosen, int, "chosen option")
        out.append(
            ChoiceResult(
                method,
                lls,
                chosen,
                _check(item.get("raw_text"), str, "reply"),
                _check(item.get("n_tokens"), int, "token count"),
            )
        )
    return out


def encode_info(info: ModelInfo) -> dict[str, Any]:
    return {
        "ref": info.ref,
        "backend": info.backend,
        "revision": info.revision,
        "is_chat": info.is_chat,
        "device": info.device,
        "dtype": info.dtype,
        "details": dict(info.details),
    }


def decode_info(value: Any) -> ModelInfo:
    data = _check(value, dict, "model info")
    details = _check(data.get("details", {}), dict, "model details")
    return ModelInfo(
        ref=_check(data.get("ref"), str, "model ref"),
        backend=_check(data.get("backend"), str, "backend name"),
        revision=_check(data.get("revision"), str, "revision"),
        is_chat=_check(data.get("is_chat"), bool, "chat flag"),
        device=_check(data.get("device"), str, "device"),
        dtype=_check(data.get("dtype"), str, "dtype"),
        details={_check(k, str, "detail"): _check(v, str, "detail") for k, v in details.items()},
    )


def check_count(value: Any) -> int:
    return _check(value, int, "token count")
