"""A bounded, expiring in-process map: the local side of the Redis-backed stores (the thinking
store, the signed-kind map). Oldest entries go first past the bound; an expired entry reads as
absent. Time is `time.monotonic()`, passed in so callers read the clock once per batch."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class ExpiringLru(Generic[V]):
    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def put(self, key: str, value: V, expires: float) -> None:
        self._entries[key] = (expires, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def get(self, key: str, now: float) -> V | None:
        hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] > now else None
