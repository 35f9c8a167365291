"""Choosing a deployment: sticky weighted rendezvous hashing, cooldowns, provider-kind pinning.

A conversation (session key) maps to the same deployment while it is healthy, so its prompt
cache is read back; different conversations spread by weight. Rendezvous hashing moves only the
affected share when a deployment is added or removed. Cooldowns are a preference, never a wall:
cooling deployments go to the back of the order, they are not removed. When a conversation's own
deployment is cooling, the breakpoint-aware fallback (gateway/prefix_digest.py) picks the healthy
deployment likeliest to hold its cached prefix. `EZAT_ROUTING_POLICY` swaps rendezvous for one of
the naive policies the cache benchmark compares it with (gateway/routing_policies.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from catalog.snapshot import Route
from gateway import prefix_digest, routing_policies
from gateway.cooldown_feed import CooldownFeed, channel, cooldown_key, encode
from gateway.metrics import SIDE_EFFECT_FAILURES
from gateway.routing_policies import rendezvous_order

logger = logging.getLogger(__name__)

SESSION_MAX = 256


def session_key(header: str | None, prompt_cache_key: str | None, body: dict[str, Any]) -> str:
    """`x-ezat-session` › `prompt_cache_key` › a hash of the system prompt and first message."""
    if header:
        return "h:" + header[:SESSION_MAX]
    if prompt_cache_key:
        return "p:" + prompt_cache_key[:SESSION_MAX]
    first = (body.get("messages") or [None])[0]
    if isinstance(first, dict):
        first = {**first, "content": _as_blocks(first.get("content"))}
    digest = hashlib.blake2b(digest_size=16)
    for part in (_as_blocks(body.get("system")), first):
        digest.update(orjson.dumps(_identity(part), option=orjson.OPT_NON_STR_KEYS))
    return "c:" + digest.hexdigest()


HASHED_HEAD = 16 * 1024
HASHED_TAIL = 1024


def _identity(value: Any) -> Any:
    """What identifies a part of the prompt, cheaply.

    - `cache_control` is left out: breakpoints move every turn (the newest message carries one,
      so the first message has it on turn 1 only) and must not change the conversation's key.
    - A long string stands for itself by its length, first 16 KiB and last 1 KiB: serialising
      and hashing all of a 100k-token first message cost ~0.5 ms per request, more than the
      rest of the gateway's work on it. Conversations that agree on all three share a
      deployment: a routing preference, never a correctness issue.
    """
    if isinstance(value, str):
        if len(value) <= HASHED_HEAD + HASHED_TAIL:
            return value
        return f"{len(value)}|{value[:HASHED_HEAD]}|{value[-HASHED_TAIL:]}"
    if isinstance(value, dict):
        return {k: _identity(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_identity(v) for v in value]
    return value


def _as_blocks(content: Any) -> Any:
    # A string is shorthand for one text block; clients switch forms to attach a breakpoint.
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def has_thinking_signatures(raw_body: bytes) -> bool:
    return b'"signature"' in raw_body


class HealthBoard:
    """Consecutive failures → cooldown. Local state, mirrored through Redis when configured."""

    def __init__(self) -> None:
        self._failures: dict[int, int] = {}
        self._failed_at: dict[int, float] = {}  # wall clock of each deployment's latest failure
        self._cooling_until: dict[int, float] = {}
        # When a cooldown of its own length (cool_down's `seconds`) began; others began
        # EZAT_COOLDOWN_SECONDS before they end.
        self._began: dict[int, float] = {}
        self._synced_at = 0.0
        self._sync_task: asyncio.Task[None] | None = None
        self._redis: Any = None
        # Other processes' cooldowns as they happen (gateway/cooldown_feed.py).
        self.feed = CooldownFeed(self)

    def _redis_client(self) -> Any:
        if self._redis is None and settings.REDIS_URL:
            from core.redis_clients import async_client

            self._redis = async_client(
                settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5
            )
        return self._redis

    def is_cooling(self, deployment_id: int, now: float | None = None) -> bool:
        until = self._cooling_until.get(deployment_id)
        return until is not None and until > (now if now is not None else time.time())

    async def prime(self, deployment_ids: list[int]) -> None:
        """Before routing: make sure this process knows the cooldowns of these deployments.

        With the feed subscribed, that is a read of the deployments it has not seen since it
        subscribed (once each; later changes arrive as messages), so every process honours a
        cooldown another one set from its first request on, without a round trip per request.
        Without the feed (no Redis, or reconnecting), the background poll below.
        """
        self.feed.start()
        missing = self.feed.unknown(deployment_ids)
        if missing and await self._sync(missing):
            self.feed.mark_known(missing)

    def learn(self, deployment_id: int, until: float) -> None:
        """Another process cooled this deployment down until `until` (wall clock)."""
        if until > time.time():
            self._cooling_until[deployment_id] = max(
                until, self._cooling_until.get(deployment_id, 0.0)
            )

    def forget(self, deployment_id: int) -> None:
        """Another process saw this deployment answer again: its cooldown is over."""
        self._cooling_until.pop(deployment_id, None)

    def refresh(self, deployment_ids: list[int]) -> None:
        """Learn other processes' cooldowns of these deployments (at most once a second): a
        request with a chain of models asks for all of its models' deployments at once."""
        self._maybe_sync(deployment_ids)

    def order(self, routes: Sequence[Route], session: str) -> list[Route]:
        return self.placement(routes, session).order

    def placement(self, routes: Sequence[Route], session: str) -> Placement:
        """Healthy deployments in the routing policy's order, then cooling ones."""
        self._maybe_sync([r.deployment.id for r in routes])
        now = time.time()
        policy = routing_policies.current()
        if isinstance(policy, routing_policies.Rendezvous):
            ranked = rendezvous_order(routes, session)
            healthy = [r for r in ranked if not self.is_cooling(r.deployment.id, now)]
            cooling = [r for r in ranked if self.is_cooling(r.deployment.id, now)]
            # Displaced: the conversation's own deployment (its rendezvous winner) is cooling.
            return Placement(healthy, cooling, bool(cooling) and cooling[0] is ranked[0])
        healthy = [r for r in routes if not self.is_cooling(r.deployment.id, now)]
        cooling = [r for r in routes if self.is_cooling(r.deployment.id, now)]
        return Placement(policy.rank(healthy, session), rendezvous_order(cooling, session), False)

    def success(self, deployment_id: int, since: float | None = None) -> None:
        """A deployment that answers is healthy again, in this process and (via Redis) in all.

        `since`: when the attempt was sent (wall clock). An answer to an attempt sent before the
        deployment's latest failure, or before its cooldown began (a long request that was
        already running when the deployment started failing), is old news: it neither resets
        the failure count nor ends the cooldown. Otherwise requests finishing on a failing
        deployment keep it from ever cooling down, or re-open it.
        """
        if since is not None:
            until = self._cooling_until.get(deployment_id)
            began = self._began.get(deployment_id, -math.inf)
            if until is not None and deployment_id not in self._began:
                began = until - settings.EZAT_COOLDOWN_SECONDS
            if since < max(began, self._failed_at.get(deployment_id, -math.inf)):
                return
        self._failures.pop(deployment_id, None)
        self._began.pop(deployment_id, None)
        if self._cooling_until.pop(deployment_id, None) is not None:
            client = self._redis_client()
            if client is not None:
                asyncio.get_running_loop().create_task(self._clear(deployment_id))

    async def _clear(self, deployment_id: int) -> None:
        try:
            client = self._redis_client()
            await client.delete(cooldown_key(deployment_id))
            await client.publish(channel(), encode(deployment_id, None))
        except Exception:  # the key expires with its TTL; until then others keep avoiding it
            SIDE_EFFECT_FAILURES.labels("cooldown_clear").inc()
            logger.warning("could not clear cooldown", exc_info=True)

    def failure(self, deployment_id: int) -> None:
        self._failed_at[deployment_id] = time.time()
        count = self._failures.get(deployment_id, 0) + 1
        self._failures[deployment_id] = count
        if count >= settings.EZAT_COOLDOWN_FAILURES:
            until = time.time() + settings.EZAT_COOLDOWN_SECONDS
            self._cooling_until[deployment_id] = until
            self._failures[deployment_id] = 0
            logger.warning("deployment cooling down", extra={"deployment_id": deployment_id})
            client = self._redis_client()
            if client is not None:
                asyncio.get_running_loop().create_task(self._publish(deployment_id, until))

    def cool_down(self, deployment_id: int, seconds: float | None = None) -> None:
        """Cool a deployment down now (its credentials could not be refreshed, say), whatever
        its failure count: routing prefers the others until the cooldown ends. `seconds`: for
        this long instead of EZAT_COOLDOWN_SECONDS (a provider quota used up)."""
        if seconds is None:
            for _ in range(max(1, settings.EZAT_COOLDOWN_FAILURES)):
                self.failure(deployment_id)
            return
        now = time.time()
        self._failed_at[deployment_id] = now
        self._failures[deployment_id] = 0
        until = max(now + seconds, self._cooling_until.get(deployment_id, 0.0))
        self._cooling_until[deployment_id] = until
        self._began[deployment_id] = now
        logger.warning(
            "deployment cooling down", extra={"deployment_id": deployment_id, "seconds": seconds}
        )
        if self._redis_client() is not None:
            asyncio.get_running_loop().create_task(self._publish(deployment_id, until))

    async def _publish(self, deployment_id: int, until: float) -> None:
        try:
            client = self._redis_client()
            await client.set(
                cooldown_key(deployment_id),
                str(until),
                ex=max(1, int(until - time.time()) + 1),
            )
            # After the key: a process that subscribes in between reads the key instead.
            await client.publish(channel(), encode(deployment_id, until))
        except Exception:  # the local cooldown still applies; other processes learn later
            SIDE_EFFECT_FAILURES.labels("cooldown_publish").inc()
            logger.warning("could not publish cooldown", exc_info=True)

    def _maybe_sync(self, deployment_ids: list[int]) -> None:
        if not settings.REDIS_URL or time.monotonic() - self._synced_at < 1.0:
            return
        if self.feed.live and not self.feed.unknown(deployment_ids):
            return  # every change of these arrives as a message
        if self._sync_task is not None and not self._sync_task.done():
            return
        self._synced_at = time.monotonic()
        self._sync_task = asyncio.get_running_loop().create_task(self._sync(deployment_ids))

    async def _sync(self, deployment_ids: list[int]) -> bool:
        try:
            values = await self._redis_client().mget([cooldown_key(d) for d in deployment_ids])
        except Exception:  # routing keeps its local view; counted, retried next second
            SIDE_EFFECT_FAILURES.labels("cooldown_sync").inc()
            logger.debug("cooldown sync failed", exc_info=True)
            return False
        for deployment_id, value in zip(deployment_ids, values, strict=True):
            if value is not None:
                self._cooling_until[deployment_id] = max(
                    float(value), self._cooling_until.get(deployment_id, 0.0)
                )
        return True

    def state(self, deployment_ids: Sequence[int]) -> dict[int, float | None]:
        now = time.time()
        return {
            d: (self._cooling_until[d] if self.is_cooling(d, now) else None) for d in deployment_ids
        }

    def reset(self) -> None:
        self._failures.clear()
        self._failed_at.clear()
        self._cooling_until.clear()
        self._began.clear()


@dataclass(frozen=True, slots=True)
class Placement:
    healthy: list[Route]
    cooling: list[Route]
    displaced: bool

    @property
    def order(self) -> list[Route]:
        return self.healthy + self.cooling


health = HealthBoard()


def cooldown_state(deployment_ids: Sequence[int]) -> dict[int, float | None]:
    """For the operator console: when each deployment's cooldown ends (None = healthy)."""
    if settings.REDIS_URL:
        import redis

        from core.redis_clients import sync_client

        try:
            client = sync_client(settings.REDIS_URL, socket_timeout=0.5)
            values = client.mget([cooldown_key(d) for d in deployment_ids])
            return {
                d: (float(v) if v is not None else None)
                for d, v in zip(deployment_ids, values, strict=True)
            }
        except redis.RedisError:
            SIDE_EFFECT_FAILURES.labels("cooldown_state").inc()
    return health.state(deployment_ids)


async def route_order(
    routes: Sequence[Route], model_id: str, session: str, prefix: str | None
) -> tuple[list[Route], bool]:
    """The order in which a request tries the model's deployments, and whether the prefix
    digest already chose its first one.

    In the usual case this is pure computation (no I/O). Only a displaced conversation (its
    deployment cooling) consults the prefix digest, which may read Redis once.
    """
    await health.prime([r.deployment.id for r in routes])
    placed = health.placement(routes, session)
    if not placed.displaced or not _prefix_aware():
        return placed.order, False
    healthy = await prefix_digest.digest.prefer(placed.healthy, model_id, session, prefix)
    return healthy + placed.cooling, True


async def failover_order(
    remaining: Sequence[Route], model_id: str, session: str, prefix: str | None
) -> list[Route]:
    """After the conversation's own deployment failed an attempt, the deployments left to try.

    A failure is the other way a conversation gets displaced (its deployment is not cooling
    yet, or its cooldown ran out while it is still down), so the same breakpoint-aware choice
    applies to the next attempt.
    """
    if not _prefix_aware() or len(remaining) < 2:
        return list(remaining)
    now = time.time()
    healthy = [r for r in remaining if not health.is_cooling(r.deployment.id, now)]
    cooling = [r for r in remaining if health.is_cooling(r.deployment.id, now)]
    return await prefix_digest.digest.prefer(healthy, model_id, session, prefix) + cooling


def _prefix_aware() -> bool:
    return settings.EZAT_ROUTING_PREFIX_AWARE and isinstance(
        routing_policies.current(), routing_policies.Rendezvous
    )
