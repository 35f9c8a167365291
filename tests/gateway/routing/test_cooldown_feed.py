"""The cooldown feed (gateway/cooldown_feed.py) against the session's real Redis: two health
boards stand for two gateway processes. A cooldown one sets, and its end, reach the other as
messages, after one read per deployment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from gateway.cooldown_feed import channel, decode, encode
from gateway.routing import HealthBoard, cooldown_key
from tests import services
from tests.waiting import async_wait_for

DEPLOYMENT = 987_654  # an id no catalog of this database uses


def test_messages_round_trip() -> None:
    assert decode(encode(3, 1234.5).encode()) == (3, 1234.5)
    assert decode(encode(3, None)) == (3, None)
    assert decode(b"garbage") is None


@pytest.fixture
async def boards(settings: Any) -> AsyncIterator[tuple[HealthBoard, HealthBoard]]:
    url = services.redis_url(services.REDIS_DB_ROUTING)
    settings.REDIS_URL = url
    settings.EZAT_COOLDOWN_FAILURES = 3
    settings.EZAT_COOLDOWN_SECONDS = 30.0
    plain = redis.Redis.from_url(url)
    plain.delete(cooldown_key(DEPLOYMENT))
    one, two = HealthBoard(), HealthBoard()
    yield one, two
    for board in (one, two):
        task = board.feed._task
        if task is not None:
            task.cancel()
    plain.delete(cooldown_key(DEPLOYMENT))


class CountingMget:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def __call__(self, keys: list[str]) -> Any:
        self.calls += 1
        return await self.inner(keys)


async def test_a_cooldown_and_its_end_reach_another_process_as_messages(
    boards: tuple[HealthBoard, HealthBoard],
) -> None:
    one, two = boards
    await two.prime([DEPLOYMENT])  # starts its feed

    async def live() -> bool:
        return two.feed.live

    await async_wait_for(live, what="the second board's feed subscribed")
    client = two._redis_client()
    counting = CountingMget(client.mget)
    client.mget = counting
    await two.prime([DEPLOYMENT])  # the one read of this deployment, since it subscribed
    await two.prime([DEPLOYMENT])
    assert counting.calls == 1 and not two.is_cooling(DEPLOYMENT)

    for _ in range(3):
        one.failure(DEPLOYMENT)

    async def cooling() -> bool:
        return two.is_cooling(DEPLOYMENT)

    await async_wait_for(cooling, what="the cooldown reaching the second board")
    await two.prime([DEPLOYMENT])
    two.refresh([DEPLOYMENT])  # the poll is off while the feed is live
    assert counting.calls == 1  # learned from the message, not by reading

    one.success(DEPLOYMENT)

    async def healthy() -> bool:
        return not two.is_cooling(DEPLOYMENT)

    await async_wait_for(healthy, what="the cooldown's end reaching the second board")
    assert counting.calls == 1


def test_the_channel_is_per_database(settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:6379/3"
    three = channel()
    settings.REDIS_URL = "redis://127.0.0.1:6379"
    assert three != channel() and three.endswith(":db3") and channel().endswith(":db0")
