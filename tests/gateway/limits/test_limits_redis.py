"""RedisLimiter specifics: several processes sharing Redis, Redis down, key layout, big amounts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis_async
from prometheus_client import REGISTRY

from gateway.limits.base import (
    Admitted,
    CapacityExhausted,
    InsufficientFunds,
    LimiterUnavailable,
    RateLimited,
)
from gateway.limits.redis import RedisLimiter
from gateway.limits.seed import DbMoneySource
from tests.gateway.limits.conftest import (
    DEAD_REDIS_URL,
    REDIS_URL,
    FakeClock,
    StaticMoney,
    delete_prefix,
    new_prefix,
    orm,
    req,
)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    p = new_prefix()
    yield p
    await delete_prefix(p)


@pytest.fixture
async def raw() -> AsyncIterator[redis_async.Redis]:
    client = redis_async.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


async def close(*limiters: RedisLimiter) -> None:
    for lim in limiters:
        await lim.aclose()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_rpm_exact_across_two_processes(prefix: str, clock: FakeClock) -> None:
    a = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    b = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    try:
        results = await asyncio.gather(
            *(lim.admit(req(rpm_limit=60)) for _ in range(100) for lim in (a, b)),
            return_exceptions=True,
        )
    finally:
        await close(a, b)
    assert sum(isinstance(r, Admitted) for r in results) == 60
    assert sum(isinstance(r, RateLimited) for r in results) == 140


async def test_a_burst_shares_one_pipelined_connection(prefix: str, clock: FakeClock) -> None:
    """1,000 admissions at once go over one connection, each answered by its own reply (they
    differ: every fifth key is over its limit), with no pool to exhaust (a 1,000-stream burst
    once got 900 × 503 from redis-py's pool)."""
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    try:
        requests = [req(key_id=k, rpm_limit=0 if k % 5 == 0 else 10) for k in range(1, 1001)]
        results = await asyncio.gather(*(lim.admit(r) for r in requests), return_exceptions=True)
        for r, res in zip(requests, results, strict=True):
            expected = RateLimited if r.rpm_limit == 0 else Admitted
            assert isinstance(res, expected), (r.key_id, res)
        fast = lim._redis().fast
        assert fast is not None and fast.connections_opened == 1
    finally:
        await close(lim)


async def test_scripts_flushed_from_redis_are_loaded_again(prefix: str, clock, raw) -> None:
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    try:
        assert isinstance(await lim.admit(req(rpm_limit=10)), Admitted)
        await raw.script_flush()  # what a Redis restart does
        fast = lim._redis().fast
        assert fast is not None
        sent = fast.commands_sent
        assert isinstance(await lim.admit(req(rpm_limit=10)), Admitted)
        assert fast.commands_sent - sent == 3  # EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA
    finally:
        await close(lim)


async def test_a_redis_that_stops_answering_times_out_and_the_next_call_reconnects(
    prefix: str, clock: FakeClock
) -> None:
    """A reply that never comes fails the call (money fails closed) instead of hanging, and the
    connection is dropped: a late reply would otherwise answer the next caller."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    lim = RedisLimiter(
        f"redis://127.0.0.1:{port}/0",
        prefix=prefix,
        money=StaticMoney(),
        clock=clock,
        socket_timeout=0.2,
        breaker_seconds=0,
    )
    try:
        started = time.monotonic()
        with pytest.raises(LimiterUnavailable):
            await lim.admit(req(hold_nano=1_000))
        assert time.monotonic() - started < 3  # the 0.2 s socket timeout, not a hang
        with pytest.raises(LimiterUnavailable):
            await lim.admit(req(hold_nano=1_000))
        fast = lim._redis().fast
        assert fast is not None and fast.connections_opened == 2
    finally:
        await lim.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


def test_only_plain_tcp_urls_use_the_lean_client() -> None:
    from gateway.limits.resp import RespClient

    assert RespClient.supports("redis://user:pw@10.0.0.1:6380/2")
    assert not RespClient.supports("rediss://10.0.0.1:6380/2")
    assert not RespClient.supports("unix:///run/redis.sock")


def test_pack_writes_every_argument_as_str_would() -> None:
    """hiredis packs str/int/float/bytes; anything else falls back to `str()`, as before."""
    from gateway.limits.resp import pack

    parts = (b"EVALSHA", "abc", 2, "k1", "k\u00e9", -3, 0.1 + 0.2, "", 10**20)
    expected = b"*9\r\n" + b"".join(
        b"$%d\r\n%s\r\n" % (len(r), r)
        for r in (p if isinstance(p, bytes) else str(p).encode() for p in parts)
    )
    assert pack(*parts) == expected
    assert pack(b"X", None, True) == b"*3\r\n$1\r\nX\r\n$4\r\nNone\r\n$4\r\nTrue\r\n"


async def test_lean_client_authenticates_and_selects_its_db(raw) -> None:
    """AUTH and SELECT are written before any command can use the connection."""
    from gateway.limits.resp import RespClient, pack

    await raw.set("ezat:test:resp-db", "here")  # REDIS_URL's db
    client = RespClient(REDIS_URL, socket_timeout=1, connect_timeout=1)
    other = RespClient(REDIS_URL.rsplit("/", 1)[0] + "/0", socket_timeout=1, connect_timeout=1)
    try:
        first, second = await asyncio.gather(
            client.call(pack(b"GET", "ezat:test:resp-db")),
            client.call(pack(b"GET", "ezat:test:resp-db")),
        )
        assert first == second == "here"
        if not REDIS_URL.endswith("/0"):
            assert await other.call(pack(b"GET", "ezat:test:resp-db")) is None
        bad = RespClient(
            REDIS_URL.replace("redis://", "redis://nobody:wrong@"),
            socket_timeout=1,
            connect_timeout=1,
        )
        with pytest.raises(redis_async.ResponseError):
            await bad.call(pack(b"PING"))
        await bad.aclose()
    finally:
        await raw.delete("ezat:test:resp-db")
        await client.aclose()
        await other.aclose()


async def test_100_concurrent_against_a_cap_covering_10(prefix: str, org_rows: dict) -> None:
    """Cold state (both processes seed from the DB at once), Redis's own clock."""
    hold, ids = 1_000, {"org_id": org_rows["org"].pk, "key_id": org_rows["key"].pk}
    spent = org_rows["key_month_spent"]
    cap = spent + 10 * hold
    money = DbMoneySource()
    a = RedisLimiter(REDIS_URL, prefix=prefix, money=money)
    b = RedisLimiter(REDIS_URL, prefix=prefix, money=money)
    from accounts.models import Organization

    await orm(lambda: Organization.objects.filter(pk=ids["org_id"]).update(balance_nano=10**12))
    try:
        reqs = [req(**ids, hold_nano=hold, spend_cap_nano=cap) for _ in range(100)]
        results = await asyncio.gather(
            *((a if i % 2 else b).admit(r) for i, r in enumerate(reqs)), return_exceptions=True
        )
        admitted = [r for r, res in zip(reqs, results, strict=True) if isinstance(res, Admitted)]
        assert len(admitted) == 10
        assert all(
            isinstance(res, InsufficientFunds) and res.scope == "key_cap"
            for res in results
            if not isinstance(res, Admitted)
        )
        # every admitted request costs its full hold: the cap is reached, never passed
        await asyncio.gather(
            *(a.settle(r.request_id, **ids, hold_nano=hold, cost_nano=hold) for r in admitted)
        )
        with pytest.raises(InsufficientFunds):
            await b.admit(req(**ids, hold_nano=1, spend_cap_nano=cap))
    finally:
        await close(a, b)


async def test_redis_down_free_requests_fail_open_money_fails_closed(settings) -> None:
    settings.EZAT_FAILOPEN_RPM_FRACTION = 0.5
    lim = RedisLimiter(DEAD_REDIS_URL, prefix="ezat:", money=StaticMoney())
    before = sample("ezat_limiter_fail_open_total")
    started = time.monotonic()
    try:
        admitted = [await lim.admit(req(rpm_limit=10, hold_nano=0)) for _ in range(5)]
        assert [a.rate.limit for a in admitted] == [5] * 5  # floor(10 × 0.5), per process
        with pytest.raises(RateLimited):
            await lim.admit(req(rpm_limit=10, hold_nano=0))
        assert sample("ezat_limiter_fail_open_total") - before == 6
        with pytest.raises(LimiterUnavailable):
            await lim.admit(req(hold_nano=1_000))
        # an admitted request can still finish: neither settle nor release raises
        errors = sample("ezat_limiter_errors_total", op="settle")
        await lim.settle("x", key_id=1, org_id=1, hold_nano=1_000, cost_nano=10)
        assert sample("ezat_limiter_errors_total", op="settle") - errors == 1
        await lim.release_slot("x", 1)
        with pytest.raises(LimiterUnavailable):
            await lim.in_flight([1])
    finally:
        await lim.aclose()
    assert time.monotonic() - started < 5  # no retry storm: every call fails fast


async def test_redis_down_fallback_keeps_per_process_slots(settings) -> None:
    lim = RedisLimiter(DEAD_REDIS_URL, money=StaticMoney(), breaker_seconds=0)
    try:
        first = req(key_id=2, candidates=((1, 1),))
        assert (await lim.admit(first)).deployment_id == 1
        with pytest.raises(CapacityExhausted):
            await lim.admit(req(key_id=2, candidates=((1, 1),)))
        await lim.release_slot(first.request_id, 1)
        assert (await lim.admit(req(key_id=2, candidates=((1, 1),)))).deployment_id == 1
        assert await lim.acquire_slot("failover", 2, 1) is True
    finally:
        await lim.aclose()


async def test_state_lost_in_redis_is_reseeded(prefix: str, clock: FakeClock) -> None:
    """Redis restarted (state gone): the next billable admission loads the numbers again."""
    money = StaticMoney()
    money.org[1] = 1_000
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=money, clock=clock)
    try:
        await lim.admit(req(hold_nano=1_000))
        with pytest.raises(InsufficientFunds):
            await lim.admit(req(hold_nano=1))
        await delete_prefix(prefix)
        await lim.admit(req(hold_nano=1_000))
        assert money.calls == 2
    finally:
        await close(lim)


async def test_amounts_above_2_pow_53_stay_exact(prefix: str, clock, raw) -> None:
    money = StaticMoney()
    big = 2**60 + 7  # ~1.15e9 USD in nano: beyond a double's exact integers
    money.org[1] = big
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=money, clock=clock)
    try:
        r = req(hold_nano=3)
        await lim.admit(r)
        await lim.settle(r.request_id, key_id=1, org_id=1, hold_nano=3, cost_nano=5)
        assert await raw.hget(f"{prefix}org:1", "base") == str(big - 5)
        assert await raw.hget(f"{prefix}org:1", "held") == "0"
    finally:
        await close(lim)


async def test_key_layout_is_prefixed_and_bounded(prefix: str, raw, settings) -> None:
    settings.EZAT_HOLD_TTL_SECONDS = 1
    money = StaticMoney()
    money.org[1] = 10**9
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=money)  # Redis's clock
    try:
        a = req(request_id="a", hold_nano=10, spend_cap_nano=10**6, candidates=((5, 2),))
        await lim.admit(a)
        month = time.strftime("%Y%m", time.gmtime())
        keys = {k async for k in raw.scan_iter(match=f"{prefix}*")}
        assert keys == {
            f"{prefix}rpm:1",
            f"{prefix}org:1",
            f"{prefix}org:1:hexp",
            f"{prefix}org:1:hold",
            f"{prefix}kmon:1:{month}",
            f"{prefix}slots:5",
            f"{prefix}slots:5:o:1",
            f"{prefix}slots:5:orgs",
        }
        lease = int(settings.EZAT_SLOT_LEASE_SECONDS * 1000)
        for key in ("slots:5", "slots:5:o:1", "slots:5:orgs"):
            assert 0 < await raw.pttl(f"{prefix}{key}") <= 2 * lease
        assert 0 < await raw.pttl(f"{prefix}rpm:1") <= 120_000
        assert await raw.ttl(f"{prefix}kmon:1:{month}") > 7 * 86400
        assert await raw.hget(f"{prefix}org:1:hold", "a") == "10:1"
        await asyncio.sleep(1.1)  # the hold (TTL 1 s) lapses; the next admission purges it
        await lim.admit(req(request_id="b", key_id=2, hold_nano=10))
        assert await raw.hkeys(f"{prefix}org:1:hold") == ["b"]
        fields = await raw.hgetall(f"{prefix}org:1")
        assert fields["held"] == "10" and "kh:1" not in fields and fields["kh:2"] == "10"
    finally:
        await close(lim)


async def test_one_round_trip_per_admission(prefix: str, clock) -> None:
    money = StaticMoney()
    money.org[1] = 10**9
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=money, clock=clock)
    try:
        await lim.admit(req(hold_nano=1, spend_cap_nano=10))  # seeds (cold)
        fast = lim._redis().fast
        assert fast is not None
        sent = fast.commands_sent
        await lim.admit(req(hold_nano=1, spend_cap_nano=10, candidates=((1, 5), (2, 5))))
        assert fast.commands_sent - sent == 1
        # With key and org concurrency limits and the share rule: still one call.
        sent = fast.commands_sent
        await lim.admit(
            req(
                hold_nano=1,
                spend_cap_nano=10,
                key_concurrency=5,
                org_concurrency=5,
                candidates=((1, 5, 0.5), (2, 5, 0.5)),
            )
        )
        assert fast.commands_sent - sent == 1
    finally:
        await close(lim)


async def test_a_dead_process_leases_lapse_and_a_live_one_keeps_its_own(
    prefix: str, clock: FakeClock, settings
) -> None:
    """Two processes share a deployment, an org's concurrency and its share; one dies (stops
    beating). Within one lease (20 s) its slots and concurrency stop counting, everywhere; the
    live process's requests keep theirs through its heartbeat."""
    settings.EZAT_SLOT_LEASE_SECONDS = 20
    dead = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    live = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    cand = {"candidates": ((1, 4, 0.5),)}  # shared cap 2, lone cap 3
    try:
        for i in range(2):
            await dead.admit(req(request_id=f"d{i}", org_id=1, org_concurrency=2, **cand))
            await live.admit(req(request_id=f"l{i}", org_id=2, key_id=2, **cand))
        assert await live.in_flight([1]) == {1: 4}
        for _ in range(3):
            clock.advance(7)
            await live.heartbeat()
        # 21 s since the dead process's last beat: gone; the live one's 2 are still counted.
        assert await live.in_flight([1]) == {1: 2}
        # Org 1 no longer holds slots or concurrency: org 2 is alone (lone cap 3) ...
        await live.admit(req(request_id="l2", org_id=2, key_id=2, **cand))
        # ... and org 1's concurrency of 2 is free again (another process of it).
        await live.admit(req(request_id="n0", org_id=1, org_concurrency=2, **cand))
        assert await live.in_flight([1]) == {1: 4}
    finally:
        await close(dead, live)


async def test_heartbeat_is_one_call_per_batch_and_never_revives_a_settled_request(
    prefix: str, clock: FakeClock, raw
) -> None:
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), clock=clock)
    try:
        for i in range(3):
            await lim.admit(req(request_id=f"r{i}", key_concurrency=9, candidates=((1, 9, 0.5),)))
        fast = lim._redis().fast
        assert fast is not None
        await lim.heartbeat()  # loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA)
        await lim.release_slot("nobody", 5)
        sent = fast.commands_sent
        settle = lim.settle("r0", key_id=1, org_id=1, hold_nano=0, cost_nano=0, deployment_id=1)
        await asyncio.gather(settle, lim.heartbeat())
        assert fast.commands_sent - sent == 2  # the release and ONE heartbeat for all leases
        assert sorted(await raw.zrange(f"{prefix}slots:1", 0, -1)) == ["r1", "r2"]
        assert sorted(await raw.zrange(f"{prefix}conc:k:1", 0, -1)) == ["r1", "r2"]
        scores = await raw.zrange(f"{prefix}slots:1", 0, -1, withscores=True)
        assert {s for _, s in scores} == {(clock.now + 20) * 1000}
    finally:
        await close(lim)


async def test_a_limiter_with_redis_time_beats_on_its_own(prefix: str, raw, settings) -> None:
    settings.EZAT_SLOT_LEASE_SECONDS = 1.0
    settings.EZAT_SLOT_HEARTBEAT_SECONDS = 0.2
    lim = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney())  # Redis's clock
    try:
        await lim.admit(req(request_id="a", candidates=((1, 2),)))
        first = await raw.zscore(f"{prefix}slots:1", "a")
        deadline = time.monotonic() + 30
        while await raw.zscore(f"{prefix}slots:1", "a") == first:
            assert time.monotonic() < deadline, "the lease was never extended"
            await asyncio.sleep(0.05)
        assert await lim.in_flight([1]) == {1: 1}
    finally:
        await close(lim)
    assert await lim_in_flight_after_close(prefix)


async def lim_in_flight_after_close(prefix: str) -> bool:
    """Once the process stops beating, its lease lapses within a lease (1 s here)."""
    probe = RedisLimiter(REDIS_URL, prefix=prefix, money=StaticMoney(), heartbeat=False)
    try:
        deadline = time.monotonic() + 30
        while (await probe.in_flight([1]))[1] != 0:
            assert time.monotonic() < deadline, "the lease outlived its process"
            await asyncio.sleep(0.1)
        return True
    finally:
        await close(probe)
