"""Redis clients for every part of the gateway: one plain server, or Redis Cluster.

`REDIS_URL` names one server (`redis://`, or `rediss://` for TLS). With `EZAT_REDIS_CLUSTER=true`
it names any node of a Redis Cluster instead, and every client here is redis-py's cluster client
(`redis.cluster.RedisCluster` / `redis.asyncio.cluster.RedisCluster`), which learns the slot map
from that node and sends each command to the primary that owns its keys.

That only works because every script, MGET and transaction of the gateway names keys of one hash
slot: the keys carry hash tags (`{…}`), see `tag` and the key layouts of the callers
(gateway/limits/scripts.py, thinking_store.py, signed_kinds.py, routing.py, prefix_digest.py,
checkpoints.py). The topology tests run them on a Redis Cluster (tests/infra/test_infra_compat.py).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


def cluster_mode() -> bool:
    return bool(getattr(settings, "EZAT_REDIS_CLUSTER", False))


def tag(prefix: str) -> str:
    """`ezat:` → `{ezat}:`: a key prefix whose keys all share one hash slot.

    Redis hashes only the part between the first `{` and the next `}`, so every key that starts
    with the result lands on one slot, whatever follows. A prefix that already holds a tag is
    kept as it is (an operator who chose their own).
    """
    if "{" in prefix and "}" in prefix.split("{", 1)[1]:
        return prefix
    stem = prefix.rstrip(":")
    return "{" + stem + "}" + prefix[len(stem) :]


def key_prefix() -> str:
    """What every Redis key of this installation starts with (EZAT_REDIS_PREFIX), so that
    installations sharing one Redis never read each other's limits, holds, cooldowns or routing
    state. Families that need one slot each add their own tag after it (`ezat:{route}:…`); the
    limiter and checkpoints write it as a tag itself (`tag`: `{ezat}:…`)."""
    return str(settings.EZAT_REDIS_PREFIX)


def async_client(url: str, **kwargs: Any) -> Any:
    """redis.asyncio.Redis, or its cluster client in cluster mode (same command methods)."""
    if cluster_mode():
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(url, **kwargs)
    import redis.asyncio as redis_async

    return redis_async.Redis.from_url(url, **kwargs)


def sync_client(url: str, **kwargs: Any) -> Any:
    """redis.Redis, or redis.cluster.RedisCluster in cluster mode."""
    if cluster_mode():
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, **kwargs)
    import redis

    return redis.Redis.from_url(url, **kwargs)
