"""Per-process cache of each org's fallback chains, for the gateway's hot path.

Like the key cache (accounts/keycache.py): an org's chains live EZAT_KEY_CACHE_TTL seconds, so a
change in the dashboard or the management API reaches every process within that time, and a
busy org costs one small query per TTL per process, not one per request. Orgs without chains are
cached too (as empty), which is nearly every org: the steady state is a dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from core.read_through import ReadThroughCache

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
        self._entries: ReadThroughCache[int, Chains] = ReadThroughCache(
            _load, lambda: settings.EZAT_KEY_CACHE_TTL, MAX_ENTRIES
        )

    async def chains(self, org_id: int) -> Chains:
        return await self._entries.get(org_id)

    def clear(self) -> None:
        self._entries.clear()


async def _load(org_id: int) -> Chains:
    return await sync_to_async(_fetch, thread_sensitive=False)(org_id)


cache = FallbackCache()
