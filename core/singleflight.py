"""Single-flight: concurrent awaits of the same key share one call.

Why: the per-process caches in front of the database (API keys, fallback chains) expire every
EZAT_KEY_CACHE_TTL seconds. Without this, every request that arrives while a refresh is on its
way makes a query of its own: a burst of 1,000 streams on one key queued ~1,000 key lookups on
the default thread pool (each with its connection health check) instead of one, and the last
stream's first token waited ~2 s for them (bench/README.md, "the burst and the key cache").
Callers still get exactly what a lookup of their own would have returned: a waiter that joins
a call in flight gets that call's result or exception, and nothing is kept once it ends.

Trade-off: a waiter that joins late gets an answer read up to one query earlier than its own
arrival, which is already true of any cached read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """One call in flight per key and event loop; every concurrent caller awaits it."""

    def __init__(self) -> None:
        self._calls: dict[K, asyncio.Future[V]] = {}

    async def run(self, key: K, call: Callable[[], Awaitable[V]]) -> V:
        loop = asyncio.get_running_loop()
        flight = self._calls.get(key)
        if flight is None or flight.get_loop() is not loop:
            flight = asyncio.ensure_future(call())
            self._calls[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        # shield: one caller cancelled (its client gone) must not cancel the call others await.
        return await asyncio.shield(flight)

    def in_flight(self) -> int:
        return len(self._calls)

    def forget(self) -> None:
        """Callers from now on start calls of their own; those in flight still answer their
        own waiters (a cache's clear(): what was on its way may predate it)."""
        self._calls.clear()

    def _landed(self, key: K, done: asyncio.Future[V]) -> None:
        if self._calls.get(key) is done:
            del self._calls[key]
        if not done.cancelled():
            # Retrieved here so that a failure every waiter abandoned is not logged by asyncio
            # as "never retrieved"; the waiters still raise it.
            done.exception()
