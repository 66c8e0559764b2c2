"""Ports for the servers the tests start as processes, one range per pytest-xdist worker.

A port found free and then closed can be taken by anyone before the server binds it.
Two sources of that race are removed here: the workers of one run draw from disjoint
ranges, and every range lies *below* the kernel's ephemeral range, so no outgoing
connection (a runner reconnecting to a server that is restarting, a test's own HTTP
client) is ever given one of them as its source port (a TCP self-connect that would
also block the restart). A port is handed out once per process.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 10_000
_handed: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def worker_range() -> range:
    """The ports of this pytest-xdist worker (all of them below the ephemeral range when
    the test runs alone)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    top = max(_ephemeral_start(), LOWEST + 1_000)
    span = (top - LOWEST) // max(count, 1)
    start = LOWEST + (index % max(count, 1)) * span
    return range(start, start + span)


def free_port() -> int:
    """A port of this worker's range that nothing listens on now."""
    ports = worker_range()
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.choice(ports)
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port in {ports}")
