"""Where the suite's time goes: a pytest plugin that records it, and a report of it.

Record (any pytest run, serial or under xdist; each worker writes its own file)::

    QB_TEST_TIMINGS=/tmp/timings python -m pytest -p tests.tools.timings ...

Report (by file, by fixture, slowest tests)::

    python tests/tools/timings.py /tmp/timings

Each file's time, for the order of the next parallel runs (``tests/durations.json``)::

    python tests/tools/timings.py --write-durations tests/durations.json /tmp/timings

A test's time is its three phases (setup, call, teardown) as pytest reports them, and
its CPU time (this process's and its ended children's, setup to teardown), with when it
began and ended and how many core-seconds the whole machine was idle meanwhile; a
fixture's time is the wall time of its setup (``pytest_fixture_setup``) and of its
teardown (its finalizers), once per instance (a session fixture once per worker). It
excludes the fixtures it requests: pytest sets those up before it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_OUT: Any = None


def _out() -> Any:
    global _OUT
    if _OUT is None:
        folder = Path(os.environ.get("QB_TEST_TIMINGS", "test-timings"))
        folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _OUT = (folder / f"{worker}-{os.getpid()}.jsonl").open("a", buffering=1)
    return _OUT


def _write(**row: Any) -> None:
    _out().write(json.dumps(row) + "\n")


_TEARDOWN_STARTED: dict[int, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Generator[None, None, None]:
    start = time.perf_counter()
    yield
    _write(
        kind="fixture",
        phase="setup",
        name=fixturedef.argname,
        scope=fixturedef.scope,
        seconds=time.perf_counter() - start,
    )
    # Finalizers run last-added first: this one runs before the fixture's own teardown,
    # and pytest_fixture_post_finalizer (registered before the setup) after it.
    fixturedef.addfinalizer(
        lambda: _TEARDOWN_STARTED.__setitem__(id(fixturedef), time.perf_counter())
    )


def pytest_fixture_post_finalizer(fixturedef: Any, request: Any) -> None:
    began = _TEARDOWN_STARTED.pop(id(fixturedef), None)
    if began is not None:
        _write(
            kind="fixture",
            phase="teardown",
            name=fixturedef.argname,
            scope=fixturedef.scope,
            seconds=time.perf_counter() - began,
        )


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _machine_idle() -> float | None:
    """Seconds every core of the machine has been idle since boot (Linux), or None."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")  # idle + iowait


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    began, idle, at = _cpu(), _machine_idle(), time.time()
    yield
    row: dict[str, Any] = {"began_at": at, "ended_at": time.time()}
    ended_idle = _machine_idle()
    if idle is not None and ended_idle is not None:
        # idle core-seconds of the whole machine while it ran (the other workers' tests
        # ran beside it): where the cores wait, not compute
        row["machine_idle"] = ended_idle - idle
    _write(kind="cpu", phase="all", name=item.nodeid, seconds=_cpu() - began, **row)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if hasattr(report, "node"):
        return  # pytest-xdist's controller hears a worker's report: the worker wrote it
    _write(
        kind="test",
        phase=report.when,
        name=report.nodeid,
        seconds=report.duration,
        outcome=report.outcome,
    )


_SERIAL_LEFT_OUT = 0


def pytest_deselected(items: list[pytest.Item]) -> None:
    global _SERIAL_LEFT_OUT
    _SERIAL_LEFT_OUT += sum(1 for item in items if item.get_closest_marker("serial"))


def pytest_collection_finish(session: pytest.Session) -> None:
    # How many tests marked serial this run left out (`make test`'s parallel run leaves
    # them all out): when none, `make test` skips its serial run, whose collection alone
    # takes about 16 s.
    _write(kind="collected", name="serial-left-out", n=_SERIAL_LEFT_OUT)


def serial_left_out(folder: Path) -> int | None:
    """Tests marked ``serial`` the recorded run left out (None: no run was recorded)."""
    counts = [row["n"] for row in _rows(folder) if row.get("name") == "serial-left-out"]
    return max(counts) if counts else None


def pytest_unconfigure(config: pytest.Config) -> None:
    global _OUT
    if _OUT is not None:
        _OUT.close()
        _OUT = None


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _test_seconds(rows: list[dict[str, Any]]) -> dict[str, float]:
    tests: dict[str, float] = defaultdict(float)
    for row in rows:
        if row["kind"] == "test":
            tests[row["name"]] += row["seconds"]
    return tests


def file_seconds(folder: Path) -> dict[str, float]:
    """Each test file's time (its tests' setup, call and teardown), rounded to 0.1 s."""
    files: dict[str, float] = defaultdict(float)
    for name, secs in _test_seconds(_rows(folder)).items():
        files[name.split("::")[0]] += secs
    return {name: round(secs, 1) for name, secs in sorted(files.items())}


def slowest(folder: Path, top: int) -> None:
    """The ``top`` slowest tests (setup, call and teardown), one line each."""
    tests = _test_seconds(_rows(folder))
    emit(f"\n{top} slowest tests of {len(tests)} (setup + call + teardown):")
    for name, secs in sorted(tests.items(), key=lambda kv: -kv[1])[:top]:
        emit(f"{secs:8.1f} s  {name}")


def report(folder: Path, top: int = 40) -> None:
    """Markdown tables: by file, by directory, by fixture, the slowest tests."""
    rows = _rows(folder)
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    fixtures: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    cpu: dict[str, float] = defaultdict(float)
    for row in rows:
        if row["kind"] == "cpu":
            cpu[row["name"].split("::")[0]] += row["seconds"]
        elif row["kind"] == "test":
            file = row["name"].split("::")[0]
            slot = {"setup": 0, "call": 1, "teardown": 2}[row["phase"]]
            by_file[file][slot] += row["seconds"]
            if row["phase"] == "setup":
                by_file[file][3] += 1
        elif row["kind"] == "fixture":
            key = (row["name"], row["scope"])
            fixtures[key][0 if row["phase"] == "setup" else 1] += row["seconds"]
            if row["phase"] == "setup":
                fixtures[key][2] += 1
    tests = _test_seconds(rows)
    total = sum(sum(v[:3]) for v in by_file.values())
    emit(f"{len(tests)} tests; {total:,.0f} s of test time (setup + call + teardown, summed)")
    if cpu:
        emit(f"{sum(cpu.values()):,.0f} s of CPU (the tests' processes and their ended children)")
    emit(f"\n## by file (top {top})\n")
    emit("| file | tests | setup s | call s | teardown s | total s | share | CPU s |")
    emit("|---|---:|---:|---:|---:|---:|---:|---:|")
    ranked = sorted(by_file.items(), key=lambda kv: -sum(kv[1][:3]))
    for file, (s, c, t, n) in ranked[:top]:
        share = 100 * (s + c + t) / total
        cells = [file, str(int(n)), *(f"{x:,.1f}" for x in (s, c, t, s + c + t)), f"{share:.1f}%"]
        cells.append(f"{cpu[file]:,.1f}" if file in cpu else "")
        emit("| " + " | ".join(cells) + " |")
    emit("\n## by directory\n")
    dirs: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for file, (s, c, t, n) in by_file.items():
        parts = file.split("/")
        key = "/".join(parts[:3]) if len(parts) > 3 else "/".join(parts[:2])
        dirs[key][0] += s + c + t
        dirs[key][1] += n
    emit("| directory | tests | total s |")
    emit("|---|---:|---:|")
    for key, (secs, n) in sorted(dirs.items(), key=lambda kv: -kv[1][0]):
        emit(f"| {key} | {int(n)} | {secs:,.0f} |")
    emit(f"\n## by fixture (top {top}; every instance's setup and teardown)\n")
    emit("| fixture | scope | instances | setup s | teardown s | mean s |")
    emit("|---|---|---:|---:|---:|---:|")
    by_cost = sorted(fixtures.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    for (name, scope), (s, t, n) in by_cost[:top]:
        emit(f"| {name} | {scope} | {int(n)} | {s:,.1f} | {t:,.1f} | {(s + t) / max(n, 1):.2f} |")
    idle = {row["name"]: row for row in rows if row["kind"] == "cpu" and "machine_idle" in row}
    if idle:
        emit(f"\n## where the cores wait (top {top})\n")
        emit("Idle core-seconds of the whole machine while a test ran (beside the other")
        emit("workers' tests), with the test's own time and CPU.\n")
        emit("| test | s | CPU s | machine idle s |")
        emit("|---|---:|---:|---:|")
        for name, row in sorted(idle.items(), key=lambda kv: -kv[1]["machine_idle"])[:top]:
            emit(
                f"| {name} | {tests.get(name, 0):,.1f} | {row['seconds']:,.1f} | "
                f"{row['machine_idle']:,.1f} |"
            )
    emit(f"\n## slowest tests (top {top})\n")
    emit("| test | s |")
    emit("|---|---:|")
    for name, secs in sorted(tests.items(), key=lambda kv: -kv[1])[:top]:
        emit(f"| {name} | {secs:,.1f} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--slowest"]:
        slowest(Path(args[2]), int(args[1]))
    elif args[:1] == ["--write-durations"]:  # --write-durations OUT FOLDER
        Path(args[1]).write_text(json.dumps(file_seconds(Path(args[2])), indent=1) + "\n")
    elif args[:1] == ["--serial-left-out"]:
        left_out = serial_left_out(Path(args[1]))
        emit("unknown" if left_out is None else str(left_out))
    else:
        report(Path(args[0]), int(args[1]) if len(args) > 1 else 40)
