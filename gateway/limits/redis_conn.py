"""The Redis limiter's connections: one client per event loop with the limiter's scripts
registered (the lean pipelined client where the URL allows it), what counts as Redis being
unreachable, and the sync client of the credit notifications and dashboard reads.

Apart from redis.py, which holds the limiter's logic (keys, arguments, replies, the failure
policy), because none of this knows what the scripts do: it is how calls reach Redis.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis.asyncio as redis_async
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ClusterDownError, MaxConnectionsError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as SyncRetry

from core.redis_clients import cluster_mode, sync_client, tag
from gateway.limits import scripts
from gateway.limits.common import ERRORS
from gateway.limits.resp import RespClient, ScriptRef

logger = logging.getLogger("gateway.limits")

# OSError covers the builtin TimeoutError and socket errors that escape redis-py's wrapping; the
# cluster errors are a Redis Cluster without a primary for the slot (failover under way).
UNREACHABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterDownError,
    SlotNotCoveredError,
)


class CircuitOpen(RedisConnectionError):
    """Redis failed moments ago; not retried until the breaker closes."""


# Connections per process (one per in-flight Redis call, not per open stream).
POOL_SIZE = 256
POOL_WAIT_SECONDS = 2.0


def pool_exhausted(exc: BaseException) -> bool:
    return isinstance(exc, MaxConnectionsError) or "No connection available" in str(exc)


def client_kwargs(socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
    # redis-py's default retry is 10 attempts with backoff up to 1 s: seconds of stall per
    # request when Redis is down. One immediate retry heals a pooled connection that Redis
    # closed (restart, idle timeout) without hiding an outage.
    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": AsyncRetry(NoBackoff(), 1),
        "decode_responses": True,
    }


class Conn:
    """A client and its registered scripts, bound to one event loop (redis.asyncio requires it)."""

    def __init__(
        self, url: str, socket_timeout: float, connect_timeout: float, *, lean: bool = True
    ) -> None:
        cluster = cluster_mode()
        self.client: Any
        if cluster:
            # redis-py's cluster client: one pool per primary. Every script's keys share the
            # limiter's hash tag (RedisLimiter._p), so each call goes to one primary.
            from redis.asyncio.cluster import RedisCluster

            self.client = RedisCluster.from_url(
                url, max_connections=POOL_SIZE, **client_kwargs(socket_timeout, connect_timeout)
            )
        else:
            # A blocking pool: a burst beyond the pool's size waits (bounded) for a free
            # connection instead of failing. redis-py's default pool raises at 100 connections,
            # which the limiter took for "Redis down" and answered 503 to a 1,000-stream burst.
            pool = redis_async.BlockingConnectionPool.from_url(
                url,
                max_connections=POOL_SIZE,
                timeout=POOL_WAIT_SECONDS,
                **client_kwargs(socket_timeout, connect_timeout),
            )
            self.client = redis_async.Redis(connection_pool=pool)
        self.admit = self.client.register_script(scripts.ADMIT)
        self.settle = self.client.register_script(scripts.SETTLE)
        self.hold_unflushed = self.client.register_script(scripts.HOLD_UNFLUSHED)
        self.seed = self.client.register_script(scripts.SEED)
        self.acquire = self.client.register_script(scripts.ACQUIRE_SLOT)
        self.release = self.client.register_script(scripts.RELEASE)
        self.heartbeat = self.client.register_script(scripts.HEARTBEAT)
        self.in_flight = self.client.register_script(scripts.IN_FLIGHT)
        # The per-request scripts go through the lean pipelined client when the URL allows it
        # (one plain server: the lean client does not follow a cluster's slot map).
        self.fast = (
            RespClient(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout)
            if lean and not cluster and RespClient.supports(url)
            else None
        )

        self._refs = {
            id(script): ScriptRef(script.sha, str(script.script))
            for script in (
                self.admit,
                self.settle,
                self.hold_unflushed,
                self.acquire,
                self.release,
                self.heartbeat,
            )
        }

    async def run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        if self.fast is not None:
            return await self.fast.evalsha(self._refs[id(script)], keys, args)
        return await script(keys=keys, args=args)

    async def aclose(self) -> None:
        if self.fast is not None:
            await self.fast.aclose()
        await self.client.aclose()


# --- credit notifications (sync: called from transaction.on_commit in any process) ------------
_sync_clients: dict[str, Any] = {}  # redis.Redis, or redis.cluster.RedisCluster
_sync_lock = threading.Lock()


def _sync_client(url: str) -> Any:
    with _sync_lock:
        client = _sync_clients.get(url)
        if client is None:
            kwargs = client_kwargs(0.5, 0.25)
            kwargs["retry"] = SyncRetry(NoBackoff(), 1)
            client = sync_client(url, **kwargs)
            _sync_clients[url] = client
        return client


def notify_credit_redis(url: str, prefix: str, org_id: int, amount_nano: int) -> None:
    """Make a credit spendable now if the org's state is loaded (if not, the seed reads it)."""
    try:
        client = _sync_client(url)
        script = client.register_script(scripts.NOTIFY_CREDIT)  # EVALSHA, loads on NOSCRIPT
        script(keys=[f"{tag(prefix)}org:{org_id}"], args=[amount_nano])
    except UNREACHABLE as exc:
        # Best effort: the credit is in the DB; the periodic reseed makes it spendable.
        ERRORS.labels("notify_credit").inc()
        logger.warning("limits: credit notification for org %s failed: %s", org_id, exc)


def open_holds_redis(url: str, prefix: str, org_id: int) -> int | None:
    """The org's open holds (sync, for dashboard pages): one HGET; None if Redis is down."""
    try:
        held = _sync_client(url).hget(f"{tag(prefix)}org:{org_id}", "held")
    except UNREACHABLE as exc:
        ERRORS.labels("open_holds").inc()
        logger.warning("limits: open holds of org %s unavailable: %s", org_id, exc)
        return None
    return max(0, int(held or 0))  # type: ignore[arg-type]


def close_sync_clients() -> None:
    with _sync_lock:
        for client in _sync_clients.values():
            client.close()
        _sync_clients.clear()


__all__ = [
    "UNREACHABLE",
    "CircuitOpen",
    "Conn",
    "close_sync_clients",
    "notify_credit_redis",
    "open_holds_redis",
    "pool_exhausted",
]
