# Included by `make llamacpp-wheel` right after llama.cpp's project() call
# (CMAKE_PROJECT_llama.cpp_INCLUDE): llama-cpp-python forces llama.cpp's "common"
# library on (arg parsing, chat parsers, JSON schemas, an HTTP client) although its
# Python package loads only libllama and libggml. Off, the build needs about half the
# CPU time (5.2 instead of 9.6 CPU-minutes on 2026-12-07) and makes the same libraries.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
