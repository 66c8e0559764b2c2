"""The TTL memo the server keeps web rankings in, and the typed identity cache on it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from quorumbench.services.accounts import KnownToken, Principal, TokenDigest
from quorumbench.services.context import IdentityCache, IdentityKey, TtlMemo, forget_identities
from quorumbench.services.runners import RunnerName
from quorumbench.services.sessions import KnownSession, SessionId


def test_get_or_make_makes_once_for_concurrent_misses():
    memo = TtlMemo(ttl_s=60, maxsize=8)
    calls = []
    started, proceed = threading.Event(), threading.Event()
    misses = threading.Semaphore(0)
    lookup = memo.get

    def counted(key):
        found = lookup(key)
        if found is None:
            misses.release()
        return found

    memo.get = counted  # type: ignore[method-assign]

    def make():
        calls.append(1)
        started.set()
        proceed.wait(5)  # until the other threads have missed
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
    # the maker misses twice (before and under the maker's lock), each other thread once
    for _ in range(2 + len(threads[1:])):
        assert misses.acquire(timeout=5)
    proceed.set()
    for thread in threads:
        thread.join(5)
    assert got == ["ranked"] * 4 and len(calls) == 1


class Timer:
    """The memo's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_get_or_make_makes_again_after_the_ttl():
    timer = Timer()
    memo = TtlMemo(ttl_s=60, maxsize=8, timer=timer)
    values = iter(["first", "second"])
    assert memo.get_or_make("k", lambda: next(values)) == "first"
    timer.now += 59.9
    assert memo.get_or_make("k", lambda: next(values)) == "first"
    timer.now += 0.2
    assert memo.get_or_make("k", lambda: next(values)) == "second"


def test_a_failed_make_stores_nothing():
    memo = TtlMemo(ttl_s=60, maxsize=8)

    def fail():
        raise ValueError("no such benchmark")

    with pytest.raises(ValueError, match="no such benchmark"):
        memo.get_or_make("k", fail)
    assert memo.get("k") is None
    assert memo.get_or_make("k", lambda: "made") == "made"


@dataclass(frozen=True)
class _Digest(IdentityKey[str]):
    value: str


@dataclass(frozen=True)
class _Other(IdentityKey[int]):
    value: str


def test_identity_keys_of_different_kinds_never_meet():
    cache = IdentityCache(ttl_s=60)
    cache.put(_Digest("abc"), "alice")
    cache.put(_Other("abc"), 7)  # the same field value, another kind of entry
    assert cache.get(_Digest("abc")) == "alice" and cache.get(_Other("abc")) == 7
    assert cache.get(_Digest("abd")) is None


def test_identities_are_remembered_for_their_ttl_only():
    timer = Timer()
    cache = IdentityCache(ttl_s=60, timer=timer)
    cache.put(_Digest("abc"), "alice")
    timer.now += 59.9
    assert cache.get(_Digest("abc")) == "alice"
    timer.now += 0.2
    assert cache.get(_Digest("abc")) is None


def test_forget_identities_forgets_every_kind_at_once():
    ctx = SimpleNamespace(identities=IdentityCache(ttl_s=60))  # all it reads
    ctx.identities.put(
        TokenDigest("d" * 64), KnownToken(Principal(1, "a", False, frozenset()), None)
    )
    ctx.identities.put(SessionId(3), KnownSession(None, datetime.now(UTC), "a", False))
    ctx.identities.put(RunnerName(1, "box"), 5)
    forget_identities(ctx)
    assert ctx.identities.get(TokenDigest("d" * 64)) is None
    assert ctx.identities.get(SessionId(3)) is None
    assert ctx.identities.get(RunnerName(1, "box")) is None
