"""The lean Redis client coalesces a loop turn's commands into one write (issue 35 item 2).

Counted on the transport itself (a wrapper around the connection's real transport), against
the session's private Redis: concurrent admissions share writes, every reply still reaches its
own caller whatever the interleaving, and a connection lost with commands queued fails each of
them (the limiter's failure policy then applies as before: money closed, free requests open).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.limits.base import Admitted, InsufficientFunds
from gateway.limits.redis import RedisLimiter
from gateway.limits.resp import RespClient, ScriptRef, pack
from tests.gateway.limits.conftest import (
    REDIS_URL,
    FakeClock,
    StaticMoney,
    delete_prefix,
    new_prefix,
    req,
)

# Echoes its caller's token (and how many arguments it got), or fails when asked to: replies
# that differ per caller, errors among them.
ECHO = """
if ARGV[2] == 'fail' then return redis.error_reply('ERR asked to fail ' .. ARGV[1]) end
return {ARGV[1], #ARGV}
"""


class CountingTransport:
    """Delegates to the real transport and counts its write calls."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.writes = 0
        self.commands = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.commands += data.count(b"EVALSHA")
        self.real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    p = new_prefix()
    yield p
    await delete_prefix(p)


async def counted(client: RespClient) -> CountingTransport:
    """Open the client's connection and put a counter on its transport."""
    await client.call(pack(b"PING"))
    conn = client._conn
    assert conn is not None and conn.transport is not None
    counter = CountingTransport(conn.transport)
    conn.transport = counter  # type: ignore[assignment]
    return counter


@dataclass
class Warm:
    limiter: RedisLimiter
    client: RespClient  # its lean client
    transport: CountingTransport  # on the client's connection


@pytest.fixture
async def warm(prefix: str, clock: FakeClock) -> AsyncIterator[Warm]:
    """A Redis limiter with org 1 and key 1 seeded and both scripts loaded (a NOSCRIPT would
    add writes), a counter on its connection's transport."""
    money = StaticMoney()
    money.org[1] = 10**9
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=money, clock=clock, heartbeat=False)
    first = req(hold_nano=1, spend_cap_nano=10**9)
    await lim.admit(first)
    await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=1, cost_nano=1)
    await lim.wait_background()
    fast = lim._redis().fast
    assert fast is not None
    yield Warm(lim, fast, await counted(fast))
    await lim.aclose()


@pytest.mark.parametrize("coalesce", [True, False])
async def test_16_concurrent_admissions_share_writes(warm: Warm, coalesce: bool) -> None:
    lim, fast, transport = warm.limiter, warm.client, warm.transport
    fast.coalesce = coalesce
    sent = fast.commands_sent
    requests = [req(hold_nano=1_000, spend_cap_nano=10**9) for _ in range(16)]
    results = await asyncio.gather(*(lim.admit(r) for r in requests))
    assert all(isinstance(r, Admitted) for r in results)
    assert fast.commands_sent - sent == 16 == transport.commands
    if coalesce:
        assert transport.writes == 1  # all 16 were queued in one loop turn
    else:
        assert transport.writes == 16
    # ... and their settlements, also concurrent: one write again
    transport.writes = 0
    await asyncio.gather(
        *(
            lim.settle(r.request_id, key_id=1, org_id=1, hold_nano=1_000, cost_nano=10)
            for r in requests
        )
    )
    assert transport.writes == (1 if coalesce else 16)
    assert await lim.open_holds(1) == 0  # the 16 holds are settled


async def test_sequential_calls_still_write_one_command_each(warm: Warm) -> None:
    for _ in range(5):
        await warm.limiter.admit(req(hold_nano=1))
    assert (warm.transport.writes, warm.transport.commands) == (5, 5)


async def test_concurrent_money_checks_stay_exact_when_coalesced(warm: Warm) -> None:
    """A coalesced batch is still run one script at a time by Redis: a cap covering 5 of 16
    concurrent holds admits exactly 5, whichever 5."""
    cap = 5_000 + 1  # the warm-up spent 1
    results = await asyncio.gather(
        *(warm.limiter.admit(req(hold_nano=1_000, spend_cap_nano=cap)) for _ in range(16)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Admitted) for r in results) == 5
    assert all(isinstance(r, Admitted | InsufficientFunds) for r in results)
    assert warm.transport.writes == 1


@pytest.mark.parametrize("seed", range(6))
async def test_replies_reach_their_own_callers_in_any_interleaving(seed: int) -> None:
    rng = random.Random(seed)
    client = RespClient(REDIS_URL, socket_timeout=5, connect_timeout=5)
    # A script Redis has not seen: the first callers get NOSCRIPT and load it, mid-batch.
    source = ECHO + f"-- {uuid.uuid4().hex}\n"
    script = ScriptRef(hashlib.sha1(source.encode()).hexdigest(), source)
    transport = await counted(client)

    async def caller(i: int) -> tuple[int, Any]:
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)  # arrive in a later loop turn than others
        token = f"t{i}-{rng.random()}"
        fail = rng.random() < 0.2
        try:
            reply = await client.evalsha(script, [], [token, "fail" if fail else "ok"])
        except ResponseError as exc:
            assert fail and token in str(exc), (token, exc)
            return i, "failed"
        assert not fail
        assert reply == [token, 2], (token, reply)
        return i, "ok"

    try:
        n = 200
        results = await asyncio.gather(*(caller(i) for i in range(n)))
        assert sorted(i for i, _ in results) == list(range(n))
        assert transport.writes < client.commands_sent / 4  # coalesced into few writes
    finally:
        await client.aclose()


async def test_a_connection_lost_with_commands_queued_fails_each_and_reconnects() -> None:
    client = RespClient(REDIS_URL, socket_timeout=5, connect_timeout=5)
    try:
        await client.call(pack(b"PING"))
        conn = client._conn
        assert conn is not None
        waiters = [client._send(conn, pack(b"PING")) for _ in range(5)]  # queued, not written
        assert conn.pending and conn.flush_scheduled
        conn.abort(RedisConnectionError("lost before the turn's write"))
        for waiter in waiters:
            with pytest.raises(RedisConnectionError):
                await waiter
        assert not conn.pending
        assert await client.call(pack(b"PING")) == "PONG"  # the next call opens a new one
        assert client.connections_opened == 2
    finally:
        await client.aclose()
