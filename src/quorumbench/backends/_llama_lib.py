"""llama.cpp's C API, the part the llama.cpp backend calls, through ctypes.

The library is llama.cpp as the ``xllamacpp`` wheel ships it: a prebuilt manylinux2014
CPU build (glibc 2.17, AVX2/FMA; 28 MB to download, nothing to compile) whose module
exports llama.h's functions. xllamacpp's own Python API is llama.cpp's server (no
per-position logits, which log-likelihood scoring needs), so this module declares the
C functions it uses itself. ``design/0003-gguf-on-llama-cpp.md`` says why this build and
not llama-cpp-python (which compiles llama.cpp for minutes on install).

The structures below are llama.h of exactly that build (xllamacpp's tag
``v2026.4.8929``, ``src/llama.cpp/include/llama.h``): a struct passed by value must
match the library byte for byte, so another xllamacpp version is refused
(:func:`library`), and ``tests/unit/backends/test_llama_lib.py`` reads every default
llama.cpp sets to check the layout.
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from quorumbench.errors import BackendError, MissingDependencyError, ModelLoadError

XLLAMACPP_VERSION = "2026.4.8929"
"""The xllamacpp wheel whose llama.cpp this module is written against."""
INSTALL = f"pip install 'xllamacpp=={XLLAMACPP_VERSION}'"

_p = ctypes.c_void_p
_i32 = ctypes.c_int32
_u32 = ctypes.c_uint32
_f32 = ctypes.c_float
_bool = ctypes.c_bool
_enum = ctypes.c_int


class ModelParams(ctypes.Structure):
    """``struct llama_model_params``."""

    _fields_ = [
        ("devices", _p),
        ("tensor_buft_overrides", _p),
        ("n_gpu_layers", _i32),
        ("split_mode", _enum),
        ("main_gpu", _i32),
        ("tensor_split", _p),
        ("progress_callback", _p),
        ("progress_callback_user_data", _p),
        ("kv_overrides", _p),
        ("vocab_only", _bool),
        ("use_mmap", _bool),
        ("use_direct_io", _bool),
        ("use_mlock", _bool),
        ("check_tensors", _bool),
        ("use_extra_bufts", _bool),
        ("no_host", _bool),
        ("no_alloc", _bool),
    ]


class ContextParams(ctypes.Structure):
    """``struct llama_context_params``."""

    _fields_ = [
        ("n_ctx", _u32),
        ("n_batch", _u32),
        ("n_ubatch", _u32),
        ("n_seq_max", _u32),
        ("n_threads", _i32),
        ("n_threads_batch", _i32),
        ("rope_scaling_type", _enum),
        ("pooling_type", _enum),
        ("attention_type", _enum),
        ("flash_attn_type", _enum),
        ("rope_freq_base", _f32),
        ("rope_freq_scale", _f32),
        ("yarn_ext_factor", _f32),
        ("yarn_attn_factor", _f32),
        ("yarn_beta_fast", _f32),
        ("yarn_beta_slow", _f32),
        ("yarn_orig_ctx", _u32),
        ("defrag_thold", _f32),
        ("cb_eval", _p),
        ("cb_eval_user_data", _p),
        ("type_k", _enum),
        ("type_v", _enum),
        ("abort_callback", _p),
        ("abort_callback_data", _p),
        ("embeddings", _bool),
        ("offload_kqv", _bool),
        ("no_perf", _bool),
        ("op_offload", _bool),
        ("swa_full", _bool),
        ("kv_unified", _bool),
        ("samplers", _p),
        ("n_samplers", ctypes.c_size_t),
    ]


class Batch(ctypes.Structure):
    """``struct llama_batch`` (token input; ``embd`` stays NULL)."""

    _fields_ = [
        ("n_tokens", _i32),
        ("token", ctypes.POINTER(_i32)),
        ("embd", ctypes.POINTER(_f32)),
        ("pos", ctypes.POINTER(_i32)),
        ("n_seq_id", ctypes.POINTER(_i32)),
        ("seq_id", ctypes.POINTER(ctypes.POINTER(_i32))),
        ("logits", ctypes.POINTER(ctypes.c_int8)),
    ]


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, _enum, ctypes.c_char_p, _p)
_FLOATS = ctypes.POINTER(_f32)
_TOKENS = ctypes.POINTER(_i32)

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [_LOG_CALLBACK, _p]),
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_model_load_from_file": (_p, [ctypes.c_char_p, ModelParams]),
    "llama_model_free": (None, [_p]),
    "llama_init_from_model": (_p, [_p, ContextParams]),
    "llama_free": (None, [_p]),
    "llama_model_get_vocab": (_p, [_p]),
    "llama_model_n_ctx_train": (_i32, [_p]),
    "llama_model_meta_val_str": (_i32, [_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "llama_vocab_n_tokens": (_i32, [_p]),
    "llama_vocab_bos": (_i32, [_p]),
    "llama_vocab_eos": (_i32, [_p]),
    "llama_n_ctx": (_u32, [_p]),
    "llama_n_batch": (_u32, [_p]),
    "llama_tokenize": (_i32, [_p, ctypes.c_char_p, _i32, _TOKENS, _i32, _bool, _bool]),
    "llama_detokenize": (_i32, [_p, _TOKENS, _i32, ctypes.c_char_p, _i32, _bool, _bool]),
    "llama_get_memory": (_p, [_p]),
    "llama_memory_seq_rm": (_bool, [_p, _i32, _i32, _i32]),
    "llama_batch_init": (Batch, [_i32, _i32, _i32]),
    "llama_batch_free": (None, [Batch]),
    "llama_decode": (_i32, [_p, Batch]),
    "llama_get_logits": (_FLOATS, [_p]),
    "llama_print_system_info": (ctypes.c_char_p, []),
    "llama_adapter_lora_init": (_p, [_p, ctypes.c_char_p]),
    "llama_set_adapters_lora": (_i32, [_p, ctypes.POINTER(_p), ctypes.c_size_t, _FLOATS]),
}


def _drop_log(level: int, text: bytes | None, user_data: int | None) -> None:
    """llama.cpp's log lines are dropped: a runner's output is its own."""


_quiet = _LOG_CALLBACK(_drop_log)


def _library_path() -> Path:
    try:
        installed = version("xllamacpp")
    except PackageNotFoundError:
        raise MissingDependencyError("xllamacpp", "gguf", install=INSTALL) from None
    if installed != XLLAMACPP_VERSION:
        raise MissingDependencyError(
            f"xllamacpp=={XLLAMACPP_VERSION} (found {installed}: its llama.cpp structures "
            "may differ from the ones declared here)",
            "gguf",
            install=INSTALL,
        )
    spec = importlib.util.find_spec("xllamacpp")
    folders = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(p for folder in folders for p in Path(folder).glob("xllamacpp*.so"))
    if not found:
        raise MissingDependencyError("xllamacpp's library (xllamacpp*.so)", "gguf", install=INSTALL)
    return found[0]


def installed() -> bool:
    """Whether the pinned xllamacpp is installed (its library is not loaded here)."""
    try:
        _library_path()
    except MissingDependencyError:
        return False
    return True


@cache
def library() -> ctypes.CDLL:
    """The llama.cpp library, its functions declared, its logging silenced, its
    backends initialised (once per process)."""
    path = _library_path()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:  # a missing libgomp.so.1 or libstdc++: this machine's setup
        raise MissingDependencyError(
            f"the system libraries llama.cpp needs ({exc})",
            "gguf",
            install="apt-get install libgomp1 libstdc++6",
        ) from exc
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    lib.llama_log_set(_quiet, None)
    lib.llama_backend_init()
    return lib


FLASH_ATTN_DISABLED = 0
"""``LLAMA_FLASH_ATTN_TYPE_DISABLED``: every context computes attention without the fused
flash-attention kernel. The default (auto) turns it on for the CPU, and its CPU kernel
gives a sequence other numbers once its cache holds over 256 tokens and the decode call
holds another sequence's token too (measured on this build, 2026-12-07: with a
300-token prompt and one batch-mate, 16 of 16 decode steps' logits differed from the
same sequence alone; 8 of 20 HumanEval answers of 1,024 tokens changed between batch 1
and 8). Without it, the logits are the same bit for bit."""


class LlamaContext:
    """A context over a loaded model: ``n_seq`` sequences of ``n_ctx / n_seq`` tokens
    each (one KV stream per sequence, not shared, and no flash attention: a sequence's
    logits are then the same, bit for bit, whatever else is in the batch;
    ``tests/integration/test_llamacpp_backend.py`` checks it)."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        model: int,
        *,
        n_ctx: int,
        n_batch: int,
        threads: int,
        n_seq: int,
        adapter: int | None = None,
    ) -> None:
        self._lib = lib
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(n_batch, n_ctx)
        params.n_threads = params.n_threads_batch = threads
        params.n_seq_max = n_seq
        params.kv_unified = False
        params.flash_attn_type = FLASH_ATTN_DISABLED
        self._ctx: int | None = lib.llama_init_from_model(model, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp cannot make a {n_ctx}-token context")
        if adapter is not None:
            adapters, scales = (_p * 1)(adapter), (_f32 * 1)(1.0)
            if lib.llama_set_adapters_lora(self._ctx, adapters, 1, scales) != 0:
                self.close()
                raise ModelLoadError("llama.cpp cannot apply the LoRA adapter to a context")
        self.n_seq = n_seq
        self.n_ctx = int(lib.llama_n_ctx(self._ctx))
        self.n_batch = int(lib.llama_n_batch(self._ctx))
        self._batch: Batch | None = lib.llama_batch_init(self.n_batch, 0, 1)
        self._memory = lib.llama_get_memory(self._ctx)

    def forget(self, seq: int, position: int = 0) -> None:
        """Drop sequence ``seq``'s KV cache from ``position`` on (-1: every sequence)."""
        self._lib.llama_memory_seq_rm(self._memory, seq, position, -1)

    def decode(self, items: list[tuple[int, int, int, bool]]) -> Any:
        """Decode at most ``n_batch`` (token, position, sequence, logits?) items; a pointer
        to the logits of the items that asked for them, in order."""
        batch = self._batch
        assert batch is not None and 0 < len(items) <= self.n_batch
        for i, (token, position, seq, logits) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if logits else 0
        batch.n_tokens = len(items)
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise BackendError(f"llama_decode failed (status {status})")
        return self._lib.llama_get_logits(self._ctx)

    def close(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            self._lib.llama_free(self._ctx)
            self._ctx = None


class LlamaModel:
    """One GGUF file and its main context (one sequence of ``n_ctx`` tokens); more
    contexts on demand (:meth:`context`). With ``lora`` (a GGUF LoRA file,
    ``backends/gguf_lora.py``), every context applies that adapter at scale 1."""

    def __init__(
        self, path: Path, *, n_ctx: int, n_batch: int, threads: int, lora: Path | None = None
    ) -> None:
        lib = self._lib = library()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0  # the CPU build; a GPU is vLLM's (issue 29)
        model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise ModelLoadError(f"llama.cpp cannot load {path} (not a GGUF model it knows)")
        self._model: int | None = model
        self.threads = threads
        self._adapter: int | None = None
        """The LoRA adapter (the model owns it and frees it with itself)."""
        if lora is not None:
            self._adapter = lib.llama_adapter_lora_init(model, str(lora).encode())
            if not self._adapter:
                self.close()
                raise ModelLoadError(f"llama.cpp cannot load the LoRA adapter {lora} on {path}")
        self.vocab = lib.llama_model_get_vocab(model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        trained = int(lib.llama_model_n_ctx_train(model))
        self.window = min(n_ctx, trained) if trained > 0 else n_ctx
        """The most tokens one sequence may hold (the model's own window when smaller)."""
        try:
            self.main = self.context(n_ctx=self.window, n_seq=1, n_batch=n_batch)
        except ModelLoadError:
            self.close()
            raise
        self.n_ctx = self.main.n_ctx
        self.n_batch = self.main.n_batch

    def context(self, *, n_ctx: int, n_seq: int, n_batch: int) -> LlamaContext:
        """A new context over this model (the caller closes it)."""
        assert self._model is not None
        return LlamaContext(
            self._lib,
            self._model,
            n_ctx=n_ctx,
            n_batch=n_batch,
            threads=self.threads,
            n_seq=n_seq,
            adapter=self._adapter,
        )

    @property
    def bos(self) -> int:
        return int(self._lib.llama_vocab_bos(self.vocab))

    @property
    def eos(self) -> int:
        return int(self._lib.llama_vocab_eos(self.vocab))

    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the file has no such key."""
        size = 256
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buffer, size)
            if n < 0:
                return None
            if n < size:
                return buffer.value.decode("utf-8", errors="replace")
            size = n + 1

    def tokenize(self, text: bytes, *, special: bool) -> list[int]:
        """Token ids of ``text``, without BOS; ``special`` parses control-token text."""
        room = len(text) + 8
        while True:
            out = (_i32 * room)()
            n = self._lib.llama_tokenize(self.vocab, text, len(text), out, room, False, special)
            if n >= 0:
                return list(out[:n])
            room = -n

    def detokenize(self, tokens: list[int]) -> bytes:
        """The bytes of ``tokens`` (control tokens render as nothing)."""
        if not tokens:
            return b""
        ids = (_i32 * len(tokens))(*tokens)
        room = 8 * len(tokens) + 16
        while True:
            out = ctypes.create_string_buffer(room)
            n = self._lib.llama_detokenize(self.vocab, ids, len(tokens), out, room, False, False)
            if n >= 0:
                return out.raw[:n]
            room = -n

    def forget_from(self, position: int) -> None:
        """Drop the main context's KV cache from ``position`` on."""
        self.main.forget(-1, position)

    def decode(self, tokens: list[int], at: int, *, all_logits: bool) -> Any:
        """Decode at most ``n_batch`` tokens at positions ``at``… in the main context; a
        pointer to the logits of every one of them (``all_logits``) or of the last."""
        last = len(tokens) - 1
        return self.main.decode(
            [(token, at + i, 0, all_logits or i == last) for i, token in enumerate(tokens)]
        )

    def close(self) -> None:
        main = getattr(self, "main", None)
        if main is not None:
            main.close()
        if self._model:
            self._lib.llama_model_free(self._model)
            self._model = None
