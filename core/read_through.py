"""A per-process read-through cache for what the hot path reads from the database.

Entries live `ttl()` seconds (read at each load, so a settings change in tests applies); past
`max_entries` the least recently loaded go first. A miss or an expired entry is loaded once for
all concurrent readers (core/singleflight.py), and `clear()` starts a new generation: a load
begun before it neither serves a read made after it nor writes its (maybe stale) entry, which is
what a revocation's clear needs. A load's exception reaches its readers and is not cached.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from core.singleflight import SingleFlight

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadThroughCache(Generic[K, V]):
    def __init__(
        self, load: Callable[[K], Awaitable[V]], ttl: Callable[[], float], max_entries: int
    ) -> None:
        self._load = load
        self._ttl = ttl
        self._max = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._loads: SingleFlight[K, V] = SingleFlight()
        self._generation = 0

    async def get(self, key: K) -> V:
        hit = self._entries.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        return await self._loads.run(key, lambda: self._refresh(key))

    async def _refresh(self, key: K) -> V:
        now, generation = time.monotonic(), self._generation
        value = await self._load(key)
        if generation == self._generation:
            self._entries[key] = (now + self._ttl(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._loads.forget()
