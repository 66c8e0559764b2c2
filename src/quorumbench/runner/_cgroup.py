"""A pids cgroup per sandbox: the process limit where ``RLIMIT_NPROC`` is not enforced.

The kernel does not apply ``RLIMIT_NPROC`` to root (user 0 of the first user
namespace), so a runner started as root caps a sandbox's processes and threads with
the pids controller instead: a child cgroup with ``pids.max``, entered by the
sandbox's first process before it starts the sandbox (so everything in it is
counted), emptied (every process killed) and removed when the worker ends.
cgroup v1 (``/sys/fs/cgroup/pids``) and v2 (the unified root, when it offers the
pids controller) are supported.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("quorumbench.runner")

_counter = itertools.count()
ENTER = 'echo $$ > "$0" && exec "$@"'
"""``sh -c`` script: move this shell into the cgroup file ``$0``, then run ``$@``."""


def pids_root() -> Path | None:
    """A writable pids hierarchy to make cgroups in, or ``None``."""
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").is_file() and os.access(v1, os.W_OK):
        return v1
    v2 = Path("/sys/fs/cgroup")
    try:
        if "pids" not in (v2 / "cgroup.controllers").read_text().split():
            return None
        control = v2 / "cgroup.subtree_control"
        if "pids" not in control.read_text().split():
            control.write_text("+pids")
    except OSError:
        return None
    return v2 if os.access(v2, os.W_OK) else None


def sweep(root: Path) -> None:
    """Remove the empty cgroups of runners that are gone (killed before cleaning up)."""
    for path in root.glob("quorumbench-*-*"):
        owner = path.name.split("-")[1]
        if not owner.isdigit() or Path("/proc", owner).exists():
            continue
        with contextlib.suppress(OSError):  # not empty: its processes are still dying
            path.rmdir()


class PidsCgroup:
    """One sandbox's cgroup: ``pids.max`` set; :meth:`destroy` kills and removes."""

    def __init__(self, root: Path, limit: int) -> None:
        self.path = root / f"quorumbench-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            (self.path / "pids.max").write_text(str(limit))
        except OSError:
            self.path.rmdir()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started from inside this cgroup."""
        return ["/bin/sh", "-c", ENTER, str(self.path / "cgroup.procs"), *argv]

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(line) for line in text.split()]

    def destroy(self, timeout_s: float = 10.0) -> None:
        """Kill everything left in the cgroup, then remove it."""
        deadline = time.monotonic() + timeout_s
        left: list[int] = []
        while time.monotonic() < deadline:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        log.warning("could not remove the sandbox cgroup %s (processes left: %s)", self.path, left)
