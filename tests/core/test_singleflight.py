"""core.singleflight, core.read_through and the two caches built on them: concurrent lookups
of one expired entry make one database query, not one each (the 1,000-stream burst queued
~1,000 key lookups)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.db import DatabaseError

from accounts import fallbackcache, keycache, keys
from accounts.keycache import KeyCache, KeyInfo, KeyLookupUnavailable
from core.singleflight import SingleFlight

SECRET = keys.generate()


async def test_concurrent_callers_share_one_call_and_its_result() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    calls = 0
    release = asyncio.Event()

    async def call() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 42

    waiters = [asyncio.create_task(flights.run("k", call)) for _ in range(50)]
    await asyncio.sleep(0)
    assert flights.in_flight() == 1
    release.set()
    assert await asyncio.gather(*waiters) == [42] * 50
    assert calls == 1 and flights.in_flight() == 0
    # Nothing is kept: the next caller makes a call of its own.
    assert await flights.run("k", call) == 42 and calls == 2


async def test_an_exception_reaches_every_waiter_and_is_not_kept() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    release = asyncio.Event()

    async def failing() -> int:
        await release.wait()
        raise DatabaseError("down")

    waiters = [asyncio.create_task(flights.run("k", failing)) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, DatabaseError) for r in results)

    async def working() -> int:
        return 7

    assert await flights.run("k", working) == 7


async def test_a_cancelled_waiter_does_not_cancel_the_call_others_await() -> None:
    flights: SingleFlight[str, str] = SingleFlight()
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        return "done"

    first = asyncio.create_task(flights.run("k", call))
    second = asyncio.create_task(flights.run("k", call))
    await asyncio.sleep(0)
    first.cancel()  # the first caller's client went away
    release.set()
    assert await second == "done"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_different_keys_fly_separately() -> None:
    flights: SingleFlight[str, str] = SingleFlight()

    async def call(name: str) -> str:
        await asyncio.sleep(0)
        return name

    assert await asyncio.gather(
        flights.run("a", lambda: call("a")), flights.run("b", lambda: call("b"))
    ) == ["a", "b"]


def _held_fetch(monkeypatch: pytest.MonkeyPatch, module: Any, result: Any) -> dict[str, Any]:
    """Replace `module._fetch` with one that counts its calls and blocks (on its worker thread,
    as the database would) until released."""
    state: dict[str, Any] = {"calls": 0, "release": threading.Event()}

    def fetch(_: object) -> Any:
        state["calls"] += 1
        if not state["release"].wait(30):
            raise AssertionError("never released")
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(module, "_fetch", fetch)
    return state


async def _release_when_all_wait(state: dict[str, Any], tasks: list[asyncio.Task[Any]]) -> None:
    # Every lookup has reached its await (one fetch on a thread, the rest joined it).
    for _ in range(1000):
        if state["calls"] and all(not t.done() for t in tasks):
            await asyncio.sleep(0.01)
            break
        await asyncio.sleep(0.01)
    state["release"].set()


async def test_a_burst_on_an_expired_key_makes_one_query(monkeypatch: pytest.MonkeyPatch) -> None:
    info = KeyInfo(id=1, org_id=2, prefix="ezat_sk_aaaa", rpm_limit=10, spend_cap_nano=None)
    state = _held_fetch(monkeypatch, keycache, info)
    cache = KeyCache()
    lookups = [asyncio.create_task(cache.lookup(SECRET)) for _ in range(200)]
    await _release_when_all_wait(state, lookups)
    assert await asyncio.gather(*lookups) == [info] * 200
    assert state["calls"] == 1
    assert await cache.lookup(SECRET) == info and state["calls"] == 1  # cached now


async def test_a_failed_refresh_is_a_503_for_every_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _held_fetch(monkeypatch, keycache, DatabaseError("connection refused"))
    cache = KeyCache()
    lookups = [asyncio.create_task(cache.lookup(SECRET)) for _ in range(20)]
    await _release_when_all_wait(state, lookups)
    results = await asyncio.gather(*lookups, return_exceptions=True)
    assert all(isinstance(r, KeyLookupUnavailable) for r in results), results
    assert state["calls"] == 1


async def test_a_refresh_begun_before_clear_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A revocation's cache clear: what was on its way before it neither serves a later lookup
    nor lands in the cache."""
    old = KeyInfo(id=1, org_id=2, prefix="ezat_sk_aaaa", rpm_limit=10, spend_cap_nano=None)
    state = _held_fetch(monkeypatch, keycache, old)
    cache = KeyCache()
    before = asyncio.create_task(cache.lookup(SECRET))
    await asyncio.sleep(0.05)
    cache.clear()
    monkeypatch.setattr(keycache, "_fetch", lambda _: None)  # revoked since
    assert await cache.lookup(SECRET) is None  # a call of its own, not the one in flight
    state["release"].set()
    assert await before == old
    assert await cache.lookup(SECRET) is None  # the old answer was not cached


async def test_fallback_chains_burst_makes_one_query(monkeypatch: pytest.MonkeyPatch) -> None:
    chains = {"anthropic/claude-sonnet-5-5": ("anthropic/claude-haiku-5-5",)}
    state = _held_fetch(monkeypatch, fallbackcache, chains)
    cache = fallbackcache.FallbackCache()
    lookups = [asyncio.create_task(cache.chains(7)) for _ in range(100)]
    await _release_when_all_wait(state, lookups)
    assert await asyncio.gather(*lookups) == [chains] * 100
    assert state["calls"] == 1
