"""Merge the lines the test run's processes saw into coverage.py's data file.

``make test`` runs every process with ``tests/tools/coverage_site`` on ``PYTHONPATH``
(its ``sitecustomize`` says why and how); each writes the lines it ran to a JSON file
in ``LINECOV_DIR``. This turns them into ``.coverage``, which ``coverage report``
then reads with the project's settings (``[tool.coverage]`` in pyproject.toml)::

    python tests/tools/linecov.py DIR [--data-file .coverage]

The files are those coverage.py's ``source`` setting measures: every module of the
package, run or not (a module no test imported counts 0% of its statements), and
nothing outside a package (Alembic's migration scripts lie in folders without an
``__init__.py``; coverage.py leaves them out, so this does too).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from coverage import CoverageData

import quorumbench

PACKAGE = Path(quorumbench.__file__).resolve().parent


def package_modules(root: Path = PACKAGE) -> list[Path]:
    """The package's modules that coverage.py finds for ``source``: the ``.py`` files of
    directories that are packages (an ``__init__.py`` in each, up to the root)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        folders = path.relative_to(root).parents
        if all((root / folder / "__init__.py").is_file() for folder in folders):
            found.append(path)
    return found


def merge(directory: Path) -> tuple[dict[str, set[int]], int]:
    """Each file's lines, over every process's report, and the number of reports."""
    lines: dict[str, set[int]] = defaultdict(set)
    reports = sorted(directory.glob("*.json"))
    for report in reports:
        for name, seen in json.loads(report.read_text(encoding="utf-8")).items():
            lines[str(Path(name).resolve())].update(seen)
    return lines, len(reports)


def write(lines: dict[str, set[int]], data_file: Path, root: Path = PACKAGE) -> None:
    """``data_file``: the lines of ``root``'s modules, and those modules run or not."""
    modules = [str(path) for path in package_modules(root)]
    data = CoverageData(basename=str(data_file))
    data.add_lines({name: sorted(lines[name]) for name in modules if lines.get(name)})
    data.touch_files(modules)
    data.write()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("directory", type=Path, help="where the processes wrote their lines")
    parser.add_argument("--data-file", type=Path, default=Path(".coverage"))
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        sys.stderr.write(f"linecov: no such directory: {args.directory}\n")
        return 2
    lines, reports = merge(args.directory)
    if not reports:
        sys.stderr.write(f"linecov: no process wrote its lines to {args.directory}\n")
        return 1
    args.data_file.unlink(missing_ok=True)
    write(lines, args.data_file)
    seen = sum(len(lines.get(str(path), ())) for path in package_modules())
    sys.stdout.write(f"linecov: {reports} processes' lines merged, {seen} lines of the package\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
