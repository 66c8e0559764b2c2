"""A small OpenAI-compatible HTTP server over a transformers model, for tests.

It serves one model (float32, CPU, greedy) with the standard library's
``ThreadingHTTPServer`` in a background thread; model calls are serialized by a lock.

* ``GET /v1/models``
* ``POST /v1/completions``: ``prompt``, ``max_tokens``, ``stop``, ``echo`` and
  ``logprobs`` (``tokens``, ``token_logprobs``, ``text_offset``, ``top_logprobs``;
  the first prompt token's log-probability is ``null``, as in OpenAI's API)
* ``POST /v1/chat/completions``: ``messages`` through the tokenizer's chat template
* either with ``stream: true``: server-sent events, ``data: {chunk}`` as each token is
  generated (text that may still turn out to be part of a stop string is held back, as
  servers do), the finish reason, with ``stream_options: {"include_usage": true}`` a
  last chunk with the token counts and no choices, then ``data: [DONE]``

Switches simulate other servers: ``logprobs=False`` refuses ``echo``/``logprobs``
(as many servers do), ``require_new_token=True`` refuses ``max_tokens: 0``,
``streaming=False`` refuses ``stream: true`` with HTTP 400, ``stream_usage=False``
never sends the usage chunk, and ``api_key`` makes the server check
``Authorization: Bearer <key>``. ``bodies`` keeps every decoded request body.

Usage::

    model = LoadedModel.load(model_dir)
    with serve(model) as server:
        ...  # server.base_url == "http://127.0.0.1:<port>/v1"
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


class RequestError(Exception):
    """Answered as an OpenAI-style error document with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Generation:
    ids: list[int]
    text: str
    finish_reason: str
    stop_reason: str | int | None


class LoadedModel:
    """A causal LM and its tokenizer, with greedy decoding and prompt log-probs."""

    def __init__(self, model: Any, tokenizer: Any, root: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.root = root
        self.lock = threading.Lock()
        eos = model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            self.eos_ids.add(tokenizer.eos_token_id)

    @classmethod
    def load(cls, model_dir: Path) -> LoadedModel:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.eval()
        return cls(model, tokenizer, model_dir.name)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False).input_ids
        return ids

    def decode(self, ids: list[int]) -> str:
        text: str = self.tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return text

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        return self.encode(text)

    @torch.inference_mode()
    def logprobs(self, ids: list[int]) -> list[float | None]:
        """Log-probability of each token given the ones before it (None for the first)."""
        logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        table = torch.log_softmax(logits, dim=-1)
        return [None] + [float(table[i - 1, ids[i]]) for i in range(1, len(ids))]

    def greedy(self, ids: list[int], max_tokens: int, stops: list[str]) -> Generation:
        """Greedy decoding until EOS, a stop string (excluded) or ``max_tokens``."""
        for step in self.greedy_steps(ids, max_tokens, stops):
            if isinstance(step, Generation):
                return step
        raise AssertionError("greedy_steps ends with its Generation")

    @torch.inference_mode()
    def greedy_steps(
        self, ids: list[int], max_tokens: int, stops: list[str]
    ) -> Iterator[str | Generation]:
        """:meth:`greedy` one token at a time: after each token, the text it made
        certain (none of it can still become part of a stop string or of an unfinished
        character), maybe empty; the :class:`Generation` last."""
        new: list[int] = []
        cache = None
        step = ids
        hold = max((len(s) for s in stops if s), default=0)
        shown = 0
        for _ in range(max_tokens):
            out = self.model(input_ids=torch.tensor([step]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            token = int(out.logits[0, -1].argmax())
            if token in self.eos_ids:
                yield Generation(new, self.decode(new), "stop", token)
                return
            new.append(token)
            text = self.decode(new)
            hits = [(text.find(s), s) for s in stops if s and s in text]
            if hits:
                cut, stop = min(hits)
                yield Generation(new, text[:cut], "stop", stop)
                return
            sure = len(text) - hold
            if "\ufffd" in text:
                sure = min(sure, text.index("\ufffd"))
            yield text[shown:sure] if sure > shown else ""
            shown = max(shown, sure)
            step = [token]
        yield Generation(new, self.decode(new), "length", None)


def _token_table(model: LoadedModel, ids: list[int], start: int) -> tuple[list[str], list[int]]:
    """Token strings of ``ids[start:]`` and their character offsets in the decoded text."""
    tokens, offsets = [], []
    before = model.decode(ids[:start])
    for i in range(start, len(ids)):
        after = model.decode(ids[: i + 1])
        tokens.append(after[len(before) :])
        offsets.append(len(before))
        before = after
    return tokens, offsets


def _logprobs_object(
    model: LoadedModel, ids: list[int], values: list[float | None], start: int
) -> dict[str, Any]:
    tokens, offsets = _token_table(model, ids, start)
    chosen = values[start:]
    top = [None if v is None else {t: v} for t, v in zip(tokens, chosen, strict=True)]
    return {"tokens": tokens, "token_logprobs": chosen, "text_offset": offsets, "top_logprobs": top}


@dataclass
class ServerOptions:
    model_name: str = "smollm2"
    logprobs: bool = True
    require_new_token: bool = False
    streaming: bool = True
    stream_usage: bool = True
    api_key: str | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


class _App:
    """The endpoints, independent of the HTTP plumbing."""

    def __init__(self, model: LoadedModel, options: ServerOptions) -> None:
        self.model = model
        self.options = options

    def _check_model(self, body: dict[str, Any]) -> None:
        if body.get("model") != self.options.model_name:
            raise RequestError(404, f"The model `{body.get('model')}` does not exist.")

    @staticmethod
    def _stops(body: dict[str, Any]) -> list[str]:
        stop = body.get("stop")
        if stop is None:
            return []
        stops = [stop] if isinstance(stop, str) else list(stop)
        if len(stops) > 4:
            raise RequestError(400, "stop: at most 4 sequences")
        return stops

    @staticmethod
    def _usage(prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def models(self) -> dict[str, Any]:
        entry = {
            "id": self.options.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "quorumbench-tests",
            "root": self.model.root,
        }
        return {"object": "list", "data": [entry]}

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise RequestError(400, "prompt must be a string")
        echo = bool(body.get("echo", False))
        want_logprobs = body.get("logprobs") is not None
        if not self.options.logprobs and (echo or want_logprobs):
            raise RequestError(400, "echo and logprobs are not supported by this server")
        max_tokens = int(body.get("max_tokens", 16))
        if max_tokens < (1 if self.options.require_new_token else 0):
            raise RequestError(400, "max_tokens must be at least 1")
        stops = self._stops(body)
        model = self.model
        with model.lock:
            ids = model.encode(prompt)
            generation = model.greedy(ids, max_tokens, stops) if max_tokens else None
            new = generation.ids if generation else []
            logprobs = None
            if want_logprobs:
                values = model.logprobs(ids + new)
                start = 0 if echo else len(ids)
                logprobs = _logprobs_object(model, ids + new, values, start)
        completion = generation.text if generation else ""
        choice = {
            "index": 0,
            "text": (prompt if echo else "") + completion,
            "logprobs": logprobs,
            "finish_reason": generation.finish_reason if generation else "length",
            "stop_reason": generation.stop_reason if generation else None,
        }
        return {
            "id": "cmpl-test",
            "object": "text_completion",
            "created": 0,
            "model": self.options.model_name,
            "choices": [choice],
            "usage": self._usage(len(ids), len(new)),
        }

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "messages must be a non-empty list")
        max_tokens = int(body.get("max_tokens") or 256)
        stops = self._stops(body)
        with self.model.lock:
            ids = self.model.chat_ids(messages)
            generation = self.model.greedy(ids, max_tokens, stops)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": generation.text},
            "finish_reason": generation.finish_reason,
            "stop_reason": generation.stop_reason,
        }
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": self.options.model_name,
            "choices": [choice],
            "usage": self._usage(len(ids), len(generation.ids)),
        }

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Check ``body`` now (errors are answered before any event), then the chunks
        of the streamed answer, each generated as it is read."""
        if not self.options.streaming:
            raise RequestError(400, "stream: streaming is not supported by this server")
        self._check_model(body)
        chat = path == "/v1/chat/completions"
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError(400, "messages must be a non-empty list")
            max_tokens = int(body.get("max_tokens") or 256)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise RequestError(400, "prompt must be a string")
            if body.get("echo") or body.get("logprobs") is not None:
                raise RequestError(400, "echo and logprobs are not streamed by this server")
            max_tokens = int(body.get("max_tokens", 16))
        stops = self._stops(body)
        options = body.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        with self.model.lock:
            ids = self.model.chat_ids(messages) if chat else self.model.encode(prompt)
        return self._chunks(chat, ids, max_tokens, stops, usage and self.options.stream_usage)

    def _chunks(
        self, chat: bool, ids: list[int], max_tokens: int, stops: list[str], usage: bool
    ) -> Iterator[dict[str, Any]]:
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(**choice: Any) -> dict[str, Any]:
            choice = {"index": 0, **choice}
            head = {"id": "stream-test", "object": kind, "created": 0}
            return {**head, "model": self.options.model_name, "choices": [choice]}

        def piece(text: str) -> dict[str, Any]:
            if chat:
                return chunk(delta={"content": text}, finish_reason=None)
            return chunk(text=text, logprobs=None, finish_reason=None)

        if chat:
            yield chunk(delta={"role": "assistant", "content": ""}, finish_reason=None)
        shown = ""
        with self.model.lock:
            for step in self.model.greedy_steps(ids, max_tokens, stops):
                if isinstance(step, Generation):
                    generation = step
                elif step:
                    shown += step
                    yield piece(step)
        assert generation.text.startswith(shown), "streamed text that was later taken back"
        if rest := generation.text[len(shown) :]:
            yield piece(rest)
        end = {"finish_reason": generation.finish_reason, "stop_reason": generation.stop_reason}
        yield chunk(delta={}, **end) if chat else chunk(text="", logprobs=None, **end)
        if usage:
            counts = self._usage(len(ids), len(generation.ids))
            yield {"id": "stream-test", "object": kind, "choices": [], "usage": counts}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, app: _App) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.app = app


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return None

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        """Server-sent events, each written as soon as it is made; HTTP/1.0, so the
        stream ends when the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        app = self.server.app
        app.options.requests.append((method, self.path))
        try:
            key = app.options.api_key
            if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
                raise RequestError(401, "Incorrect API key provided.")
            if method == "GET" and self.path == "/v1/models":
                self._answer(200, app.models())
                return
            routes = {"/v1/completions": app.completions, "/v1/chat/completions": app.chat}
            if method != "POST" or self.path not in routes:
                raise RequestError(404, f"no route {method} {self.path}")
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as exc:
                raise RequestError(400, "the body is not JSON") from exc
            app.options.bodies.append(body)
            if isinstance(body, dict) and body.get("stream"):
                self._stream(app.stream(self.path, body))
                return
            self._answer(200, routes[self.path](body))
        except RequestError as exc:
            self._answer(exc.status, {"error": {"message": exc.message, "type": "invalid_request"}})
        except Exception as exc:  # reported to the client; a test thread must not die
            self._answer(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


@dataclass
class RunningServer:
    base_url: str
    options: ServerOptions

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request received, in arrival order."""
        return self.options.requests


@contextmanager
def serve(model: LoadedModel, **options: Any) -> Iterator[RunningServer]:
    """Serve ``model`` on 127.0.0.1 (a free port) until the block ends."""
    settings = ServerOptions(**options)
    server = _Server(_App(model, settings))
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="openai-test-server",
        daemon=True,
    )
    thread.start()
    try:
        port = server.server_address[1]
        yield RunningServer(f"http://127.0.0.1:{port}/v1", settings)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
