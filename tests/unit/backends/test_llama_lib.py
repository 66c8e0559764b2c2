"""The ctypes declarations of llama.cpp's C API (``backends/_llama_lib.py``) against the
library the pinned xllamacpp wheel ships.

A structure passed by value must match the library byte for byte; a shifted or missing
field would read another field's bytes. llama.cpp fills every field of its default
parameters (``llama_model_default_params``, ``llama_context_default_params`` in
llama.cpp's ``src/llama-model.cpp`` and ``src/llama-context.cpp``), so reading each back
through our layout and finding llama.cpp's documented defaults checks the layout field
by field, the trailing ones included.
"""

from __future__ import annotations

import pytest

from quorumbench.backends import _llama_lib
from quorumbench.backends._llama_lib import XLLAMACPP_VERSION, library
from quorumbench.errors import MissingDependencyError


def test_the_model_defaults_read_back_through_our_layout():
    params = library().llama_model_default_params()
    assert (params.devices, params.tensor_buft_overrides, params.tensor_split) == (None,) * 3
    assert (params.n_gpu_layers, params.split_mode, params.main_gpu) == (-1, 1, 0)
    assert (params.progress_callback, params.kv_overrides) == (None, None)
    flags = ("vocab_only", "use_mmap", "use_direct_io", "use_mlock", "check_tensors")
    assert [getattr(params, f) for f in flags] == [False, True, False, False, False]
    assert (params.use_extra_bufts, params.no_host, params.no_alloc) == (True, False, False)


def test_the_context_defaults_read_back_through_our_layout():
    p = library().llama_context_default_params()
    assert (p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max) == (512, 2048, 512, 1)
    assert (p.n_threads, p.n_threads_batch) == (4, 4)  # GGML_DEFAULT_N_THREADS
    # rope scaling, pooling, attention, flash attention: all "unspecified" (-1)
    assert (p.rope_scaling_type, p.pooling_type, p.attention_type, p.flash_attn_type) == ((-1,) * 4)
    assert (p.rope_freq_base, p.rope_freq_scale, p.yarn_orig_ctx) == (0.0, 0.0, 0)
    yarn = (p.yarn_ext_factor, p.yarn_attn_factor, p.yarn_beta_fast, p.yarn_beta_slow)
    assert yarn == (-1.0,) * 4 and p.defrag_thold == -1.0
    assert (p.type_k, p.type_v) == (1, 1)  # GGML_TYPE_F16
    assert (p.cb_eval, p.abort_callback) == (None, None)
    flags = ("embeddings", "offload_kqv", "no_perf", "op_offload", "swa_full", "kv_unified")
    assert [getattr(p, f) for f in flags] == [False, True, True, True, True, False]
    assert (p.samplers, p.n_samplers) == (None, 0)


def test_a_batch_holds_what_it_was_made_for():
    lib = library()
    batch = lib.llama_batch_init(8, 0, 1)
    try:
        assert batch.n_tokens == 0 and not batch.embd  # tokens, not embeddings
        for i in range(8):
            batch.token[i] = i
            batch.seq_id[i][0] = 0
        assert [batch.token[i] for i in range(8)] == list(range(8))
    finally:
        lib.llama_batch_free(batch)


def test_the_library_is_the_cpu_build_it_says():
    info = library().llama_print_system_info().decode()
    assert "CPU" in info and "AVX2 = 1" in info


def test_another_xllamacpp_version_is_refused(monkeypatch):
    monkeypatch.setattr(_llama_lib, "version", lambda name: "2026.10.11549")
    with pytest.raises(MissingDependencyError) as caught:
        _llama_lib._library_path()
    message = str(caught.value)
    assert "2026.10.11549" in message and f"xllamacpp=={XLLAMACPP_VERSION}" in message


def test_a_missing_xllamacpp_names_the_install(monkeypatch):
    def missing(name: str) -> str:
        raise _llama_lib.PackageNotFoundError(name)

    monkeypatch.setattr(_llama_lib, "version", missing)
    with pytest.raises(MissingDependencyError, match=f"xllamacpp=={XLLAMACPP_VERSION}"):
        _llama_lib._library_path()
