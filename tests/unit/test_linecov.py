"""`make test`'s line coverage: what a measured process records, and what coverage.py
then reads (tests/tools/coverage_site, tests/tools/linecov.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import coverage
from tests.tools import linecov

SITE = Path(linecov.__file__).with_name("coverage_site")

MODULE = """\
from dataclasses import dataclass


@dataclass
class Row:
    name: str
    score: float = 0.0


def used(x):
    if x:
        return Row("a")
    return None


def unused():
    return 1


if __name__ == "__main__":
    used(True)
"""


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "__init__.py").write_text("VALUE = 1\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "mod.py").write_text(MODULE)
    (root / "sub" / "never.py").write_text("X = 1\nY = 2\n")
    (root / "scripts" / "0001_loaded_by_path.py").write_text("Z = 3\n")  # no __init__.py
    return root


def _measured(tmp_path: Path, root: Path, *args: str) -> Path:
    out = tmp_path / "lines"
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECOV_")}
    env.update(
        LINECOV_DIR=str(out),
        LINECOV_SOURCE=str(root),
        PYTHONPATH=os.pathsep.join([str(SITE), str(root.parent)]),
    )
    subprocess.run([sys.executable, *args], env=env, check=True, cwd=tmp_path)
    return out


def test_package_modules_are_what_coverage_source_measures(tmp_path):
    root = _package(tmp_path)
    assert [p.relative_to(root).as_posix() for p in linecov.package_modules(root)] == [
        "__init__.py",
        "sub/__init__.py",
        "sub/mod.py",
        "sub/never.py",
    ]


def test_a_module_run_with_dash_m_is_measured_line_by_line(tmp_path):
    root = _package(tmp_path)
    out = _measured(tmp_path, root, "-m", "pkg.sub.mod")
    (report,) = out.glob("*.json")
    seen = json.loads(report.read_text())
    mod = str(root / "sub" / "mod.py")
    # the class body's annotated fields ran (coverage.py counts them), so did the
    # branch taken; the other branch and the function never called did not
    assert {1, 4, 5, 6, 7, 10, 11, 12, 16, 20, 21} <= set(seen[mod])
    assert not {13, 17} & set(seen[mod])
    assert str(root / "__init__.py") in seen


def test_the_merged_lines_read_back_through_coverage_py(tmp_path):
    root = _package(tmp_path)
    out = _measured(tmp_path, root, "-m", "pkg.sub.mod")
    _measured(tmp_path, root, "-c", "import pkg.sub.mod as m; m.unused()")
    lines, reports = linecov.merge(out)
    assert reports == 2
    data_file = tmp_path / ".coverage"
    linecov.write(lines, data_file, root)

    cov = coverage.Coverage(data_file=str(data_file), config_file=False)
    cov.load()
    by_name = {}
    for name in cov.get_data().measured_files():
        _, statements, _, missing, _ = cov.analysis2(name)
        by_name[Path(name).relative_to(root).as_posix()] = (len(statements), missing)
    assert by_name["sub/mod.py"] == (13, [13])  # `return None` alone never ran
    assert by_name["sub/never.py"] == (2, [1, 2])  # never imported: 0%, not left out
    assert "scripts/0001_loaded_by_path.py" not in by_name
