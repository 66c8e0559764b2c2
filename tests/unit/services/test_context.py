"""The TTL memo the server keeps identities and web rankings in."""

from __future__ import annotations

import threading
import time

import pytest

from quorumbench.services.context import TtlMemo


def test_get_or_make_makes_once_for_concurrent_misses():
    memo = TtlMemo(ttl_s=60, maxsize=8)
    calls = []
    started = threading.Event()

    def make():
        calls.append(1)
        started.set()
        time.sleep(0.2)  # the other threads miss meanwhile
        return "ranked"

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(memo.get_or_make("board", make)))
        for _ in range(4)
    ]
    threads[0].start()
    started.wait(5)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert got == ["ranked"] * 4 and len(calls) == 1


def test_get_or_make_makes_again_after_the_ttl():
    memo = TtlMemo(ttl_s=0.05, maxsize=8)
    values = iter(["first", "second"])
    assert memo.get_or_make("k", lambda: next(values)) == "first"
    assert memo.get_or_make("k", lambda: next(values)) == "first"
    time.sleep(0.08)
    assert memo.get_or_make("k", lambda: next(values)) == "second"


def test_a_failed_make_stores_nothing():
    memo = TtlMemo(ttl_s=60, maxsize=8)

    def fail():
        raise ValueError("no such benchmark")

    with pytest.raises(ValueError, match="no such benchmark"):
        memo.get_or_make("k", fail)
    assert memo.get("k") is None
    assert memo.get_or_make("k", lambda: "made") == "made"
