"""Cooldowns set or cleared by other processes, as they happen: a Redis pub/sub channel.

Every process that cools a deployment down (or sees it answer again) writes the cooldown key
(gateway/routing.py) and publishes the change on one channel; every process listens on it.
Before this, other processes learned a cooldown by polling the keys at most once a second, in
the background, after the request that asked had already been routed: a node's first request
after another node cooled deployment A down still went to A, then failed over (issue 31,
item 9).

What a request costs:

- While the feed is subscribed, a deployment's cooldown is read once per subscription (one MGET
  by the first request that routes to it, awaited, so that request sees the cooldowns set before
  the process started or while it was not subscribed); after that, changes arrive as messages
  and routing makes no Redis call at all. Subscribing comes before that read: a change made in
  between arrives as a message, so none is missed.
- While it is not subscribed (Redis down, reconnecting), routing falls back to the background
  poll of routing.py, at most once a second, and the feed retries with a backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from django.conf import settings
from redis.exceptions import RedisError

from core.redis_clients import key_prefix
from gateway.metrics import SIDE_EFFECT_FAILURES

logger = logging.getLogger(__name__)


class HealthBoard(Protocol):
    """What the feed tells the routing's health board (gateway/routing.py HealthBoard), named
    here so that routing, which starts the feed, and the feed do not import each other."""

    def learn(self, deployment_id: int, until: float) -> None: ...

    def forget(self, deployment_id: int) -> None: ...


RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
POLL_SECONDS = 1.0  # how long one read waits for a message (the loop then checks its health)


def cooldown_key(deployment_id: int) -> str:
    """One hash tag for every cooldown: a sync reads all of a request's deployments in one MGET,
    which Redis Cluster serves only from one slot. (Few, tiny keys: one slot holds them all.)"""
    return f"{key_prefix()}{{cooldown}}:{deployment_id}"


def channel() -> str:
    """The channel beside the cooldown keys: same prefix (installations sharing one Redis
    under different prefixes keep their own), and the database number, since pub/sub channels
    are server-wide while keys are per database (two installations on databases 0 and 1 of one
    server must not hear each other's cooldowns)."""
    from urllib.parse import urlsplit

    path = urlsplit(settings.REDIS_URL).path.strip("/") or "0"
    return cooldown_key(0).rsplit(":", 1)[0] + f":events:db{path}"


def encode(deployment_id: int, until: float | None) -> str:
    """`<id> <until>`; `<id> 0` when the cooldown was cleared (the deployment answered)."""
    return f"{deployment_id} {until if until is not None else 0}"


def decode(data: Any) -> tuple[int, float | None] | None:
    if isinstance(data, bytes):
        data = data.decode("ascii", "replace")
    try:
        raw_id, raw_until = str(data).split(" ", 1)
        deployment_id, until = int(raw_id), float(raw_until)
    except ValueError:
        return None
    return deployment_id, (until if until > 0 else None)


class CooldownFeed:
    def __init__(self, board: HealthBoard) -> None:
        self._board = board
        self._task: asyncio.Task[None] | None = None
        self.live = False  # subscribed now: messages carry every change
        # Deployments whose cooldown was read since the current subscription began.
        self._known: set[int] = set()

    def start(self) -> None:
        if not settings.REDIS_URL:
            return
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        # First use, a task that ended, or one of a loop that is gone (tests run many loops).
        self.live = False
        self._known.clear()
        self._task = loop.create_task(self._run())

    def unknown(self, deployment_ids: Iterable[int]) -> list[int]:
        """Of these, the deployments a request must read before routing (none once known)."""
        if not self.live:
            return []
        return [d for d in deployment_ids if d not in self._known]

    def mark_known(self, deployment_ids: Iterable[int]) -> None:
        if self.live:
            self._known.update(deployment_ids)

    async def _run(self) -> None:
        from core.redis_clients import async_client, cluster_mode

        attempt = 0
        while True:
            # Its own connection: a subscribed connection can run no other command. No socket
            # timeout (it waits for messages); the health check pings it when idle, so a dead
            # connection ends in an error instead of silence.
            client = async_client(
                settings.REDIS_URL, socket_connect_timeout=0.5, health_check_interval=5
            )
            pubsub: Any = None
            try:
                if cluster_mode():
                    # The cluster client's pub/sub picks a node from the slot map, which a new
                    # client loads only on its first command.
                    await client.initialize()
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(channel())
                self._known.clear()
                self.live = True
                attempt = 0
                while True:
                    message = await pubsub.get_message(timeout=POLL_SECONDS)
                    if message is not None and message.get("type") == "message":
                        self._apply(message.get("data"))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                SIDE_EFFECT_FAILURES.labels("cooldown_feed").inc()
                logger.warning("cooldown feed lost, polling meanwhile (%s)", exc)
            except Exception:  # a bug must not end the feed for good: counted, logged, retried
                SIDE_EFFECT_FAILURES.labels("cooldown_feed").inc()
                logger.exception("cooldown feed failed, polling meanwhile")
            finally:
                self.live = False
                self._known.clear()
                await _close(pubsub, client)
            await asyncio.sleep(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)])
            attempt += 1

    def _apply(self, data: Any) -> None:
        change = decode(data)
        if change is None:
            return
        deployment_id, until = change
        if until is None:
            self._board.forget(deployment_id)
        else:
            self._board.learn(deployment_id, until)


async def _close(pubsub: Any, client: Any) -> None:
    try:
        if pubsub is not None:
            await pubsub.aclose()
        await client.aclose()
    except (RedisError, OSError):
        logger.debug("closing the cooldown feed's connection failed", exc_info=True)
