"""Line coverage for every Python process of a test run, without a trace function.

``make test`` puts this directory on ``PYTHONPATH`` and names a directory in
``LINECOV_DIR``; Python then imports this module at start-up in each process it
starts with that environment (the pytest workers, the CLI, the servers and runners
the tests start), before anything else is imported. Processes started with an
environment of their own (the sandboxed workers, the chaos harness's fleet) are not
measured, as they were not under coverage.py's ``patch = ["subprocess"]``.

SlipCover (plasma-umass/slipcover) instruments the bytecode of the package's modules
as they are imported and removes each probe once its line has run. Python 3.11 has no
``sys.monitoring``: a trace function (coverage.py's) makes every line of every
function in a traced thread take the interpreter's slow path, measured files or not;
this leaves the rest of the process at full speed. At exit the process writes the
line numbers it saw to ``$LINECOV_DIR/<pid>-<random>.json``; ``tests/tools/
linecov.py`` merges them into coverage.py's data file, and coverage.py reports and
gates as before (its parser decides which lines are statements, its exclusions apply).

What this loses against a trace function: the lines of a process that ends without
running ``atexit`` (``os._exit``, a signal it does not handle), which coverage.py's
default settings lose too.
"""

from __future__ import annotations

import os


def _nothing(code: object) -> tuple[()]:
    return ()


def _start(directory: str, package: str) -> None:
    import atexit
    import json
    import secrets
    from pathlib import Path

    import slipcover
    from slipcover.importer import SlipcoverLoader

    def get_code(loader: SlipcoverLoader, name: str) -> object:
        # runpy runs ``python -m package.module`` from the loader's ``get_code()``, not
        # through an import: SlipCover's loader hands that code out unmeasured.
        code = loader.orig_loader.get_code(name)  # type: ignore[attr-defined]
        return None if code is None else loader.sci.instrument(code)

    SlipcoverLoader.get_code = get_code  # type: ignore[method-assign]
    # SlipCover lists each instrumented module's possible lines and branches for its
    # own report (``get_coverage()``, which this never calls: coverage.py's parser says
    # which lines are statements). Listing them walks every code object with ``dis``, a
    # bit over half of the instrumenting: 0.55 s of a CLI command's 2.5 s (measured on
    # 2026-12-07 with py-spy).
    slipcover.Slipcover.lines_from_code = staticmethod(_nothing)  # type: ignore[method-assign]
    slipcover.Slipcover.branches_from_code = staticmethod(_nothing)  # type: ignore[method-assign]
    matcher = slipcover.FileMatcher(sources=[package])
    # No exclusions here: coverage.py applies the project's when it reports.
    measure = slipcover.Slipcover(exclude_lines=[])
    slipcover.ImportManager(measure, matcher).__enter__()
    # Alembic loads the migration scripts by path.
    slipcover.wrap_spec_from_file_location(measure, matcher)

    def save() -> None:
        # Every line whose probe fired, annotation-only lines included
        # (``get_coverage()`` drops those, coverage.py counts a field's ``name: str``).
        with measure.lock:
            for name, lines in measure._get_newly_seen().items():
                measure.all_seen[name].update(lines)
            seen = {
                name: sorted(line for line in lines if isinstance(line, int))
                for name, lines in measure.all_seen.items()
                if lines
            }
        if seen:  # whole or not at all: a process killed while writing leaves a .part
            out = Path(directory) / f"{os.getpid()}-{secrets.token_hex(6)}.json"
            part = out.with_suffix(".part")
            part.write_text(json.dumps(seen), encoding="utf-8")
            os.replace(part, out)

    atexit.register(save)


if os.environ.get("LINECOV_DIR") and os.environ.get("LINECOV_SOURCE"):
    _start(os.environ["LINECOV_DIR"], os.environ["LINECOV_SOURCE"])
