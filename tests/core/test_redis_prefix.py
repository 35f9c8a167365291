"""Issue 31 item 8: every Redis key the gateway writes carries EZAT_REDIS_PREFIX, so two
installations on one Redis share no state. Sticky-routing keys were written as `ezat:{route}:…`
whatever the prefix said.

A gateway of its own (its own Redis database and prefix) serves one request and one stream; every
key in that database (SCAN) then starts with the prefix, or with the prefix written as a hash tag
(the limiter's and checkpoints' `{prefix}:…`, core/redis_clients.py `tag`).
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest
import redis

from core.redis_clients import tag
from tests import services
from tests.support.stack import GatewayProcess, Stack, database_url, start_gateway
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

PREFIX = "inst-b:"


@pytest.fixture(scope="module")
def own_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(services.redis_url(services.REDIS_DB_PREFIX))
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def gateway(
    stack: Stack, own_redis: redis.Redis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    from django.db import connection

    with stack.blocker.unblock():
        db_url = database_url(connection.settings_dict)
    url = services.redis_url(services.REDIS_DB_PREFIX)
    # The broker too: Celery's keys are the gateway's to prefix as well.
    env = {"EZAT_REDIS_PREFIX": PREFIX, "CELERY_BROKER_URL": url}
    process = start_gateway(db_url, url, tmp_path_factory.mktemp("prefix-gw"), env)
    yield process
    process.stop()


def _keys(client: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(count=1000))


def test_every_key_one_request_and_one_stream_write_carries_the_prefix(
    e2e: Stack, gateway: GatewayProcess, own_redis: redis.Redis
) -> None:
    key = e2e.new_key()
    client = anthropic.Anthropic(
        base_url=gateway.url, api_key=key.secret, default_headers={"x-ezat-session": "prefix-1"}
    )
    system = "You answer in one word. " * 40  # a shared prefix the routing digest remembers
    messages = [{"role": "user", "content": "hi"}]
    reply = client.messages.create(model="sonnet", max_tokens=16, system=system, messages=messages)
    assert reply.content
    with client.messages.stream(
        model="sonnet", max_tokens=16, system=system, messages=messages
    ) as stream:
        assert stream.get_final_text()
    # The routing digest is written in the background (gateway/prefix_digest.py): wait for it,
    # so the keys listed below include the family that ignored the prefix.
    wait_for(lambda: any("{route}:" in k for k in _keys(own_redis)), what="routing keys")
    keys = _keys(own_redis)
    assert any("rpm:" in k for k in keys), keys  # the limiter wrote too
    foreign = [k for k in keys if not k.startswith((PREFIX, tag(PREFIX)))]
    assert foreign == [], keys
