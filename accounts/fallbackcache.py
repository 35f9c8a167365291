"""Per-process cache of each org's fallback chains, for the gateway's hot path.

Like the key cache (accounts/keycache.py): an org's chains live EZAT_KEY_CACHE_TTL seconds, so a
change in the dashboard or the management API reaches every process within that time, and a
busy org costs one small query per TTL per process, not one per request. Orgs without chains are
cached too (as empty), which is nearly every org: the steady state is a dict lookup.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from ezat.singleflight import SingleFlight

MAX_ENTRIES = 50_000

# model id (or ezat/auto) → the org's chain for it, canonical ids in order.
Chains = Mapping[str, tuple[str, ...]]
NO_CHAINS: Chains = MappingProxyType({})


def _fetch(org_id: int) -> Chains:
    from accounts.models import FallbackPolicy

    close_old_connections()
    rows = FallbackPolicy.objects.filter(org_id=org_id).values_list("model_id", "fallbacks")
    chains = {
        model_id: tuple(f for f in fallbacks if isinstance(f, str))
        for model_id, fallbacks in rows
        if isinstance(fallbacks, list)
    }
    return MappingProxyType(chains) if chains else NO_CHAINS


class FallbackCache:
    def __init__(self) -> None:
        self._entries: OrderedDict[int, tuple[float, Chains]] = OrderedDict()
        # Requests of an org whose entry expired share one refresh (ezat/singleflight.py).
        # clear() starts a new generation: a refresh begun before it neither writes its (maybe
        # stale) entry nor serves a lookup made after it.
        self._generation = 0
        self._refreshes: SingleFlight[int, Chains] = SingleFlight()

    async def chains(self, org_id: int) -> Chains:
        hit = self._entries.get(org_id)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        return await self._refreshes.run(org_id, lambda: self._refresh(org_id))

    async def _refresh(self, org_id: int) -> Chains:
        now, generation = time.monotonic(), self._generation
        chains = await sync_to_async(_fetch, thread_sensitive=False)(org_id)
        if generation != self._generation:
            return chains
        self._entries[org_id] = (now + settings.EZAT_KEY_CACHE_TTL, chains)
        self._entries.move_to_end(org_id)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)
        return chains

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._refreshes.forget()


cache = FallbackCache()
