"""The usage log's batch settle (gateway/limits/batch.py): one Redis script call per batch, on
the lean client and on redis-py alike, and the same money result as settling one by one.

The money arithmetic of a batch against settlement.settle is in the cross-backend table
(test_limits_settlement_backends.py, the "batch" steps); here: the round trips, the chunking,
and that a replayed batch charges nothing twice on every backend."""

from __future__ import annotations

from typing import Any

from gateway.limits import batch as batch_mod
from gateway.limits.batch import Settled, settle_batch
from gateway.limits.local import LocalLimiter
from tests.gateway.limits.conftest import LimiterFactory, req

ORG, KEY = 1, 1


async def _unflushed(limiter: Any, n: int, cost: int) -> list[Settled]:
    """n admitted requests whose rows are in the local log (hold_unflushed at `cost`)."""
    items = []
    for _ in range(n):
        request = req(key_id=KEY, org_id=ORG, hold_nano=10 * cost, spend_cap_nano=10**12)
        await limiter.admit(request)
        await limiter.hold_unflushed(request.request_id, key_id=KEY, org_id=ORG, cost_nano=cost)
        items.append(Settled(request.request_id, KEY, ORG, cost))
    return items


async def test_a_batch_settles_every_request_once(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter()
    items = await _unflushed(limiter, 7, 1_000)
    assert await limiter.open_holds(ORG) == 7_000
    await settle_batch(limiter, items)
    assert await limiter.open_holds(ORG) == 0
    # A replay of the same batch (a crash before the log segment was deleted) and a request
    # twice in one batch: charged once.
    await settle_batch(limiter, [*items, items[0]])
    check = req(key_id=KEY, org_id=ORG, hold_nano=1, spend_cap_nano=7_001)
    admitted = await limiter.admit(check)
    assert admitted.balance_nano == 10**12 - 7_000  # the money fixture's org balance


async def test_a_redis_batch_is_one_script_call_per_chunk(
    make_limiter: LimiterFactory, monkeypatch: Any
) -> None:
    limiter = make_limiter()
    if isinstance(limiter, LocalLimiter):
        return  # nothing to count: the in-process limiter has no round trips
    items = await _unflushed(limiter, 5, 100)
    calls: list[int] = []
    conn = limiter._redis()
    if conn.fast is not None:
        before = conn.fast.commands_sent
        await settle_batch(limiter, items)
        calls.append(conn.fast.commands_sent - before)
    else:
        real = conn.client.register_script

        def counting(source: str) -> Any:
            script = real(source)

            async def call(**kw: Any) -> Any:
                assert len(kw["args"]) == 3 + 2 * 5  # the batch's three, then two a request
                calls.append(1)
                return await script(**kw)

            return call

        with monkeypatch.context() as patched:
            patched.setattr(conn.client, "register_script", counting)
            await settle_batch(limiter, items)
    assert calls == [1]
    assert await limiter.open_holds(ORG) == 0
    # Larger than a chunk: one call per chunk, all of them settled.
    monkeypatch.setattr(batch_mod, "CHUNK", 2)
    more = await _unflushed(limiter, 5, 100)
    sent: list[int] = []
    real_settle = batch_mod._settle_redis

    async def counted(lim: Any, chunk: Any) -> None:
        sent.append(len(chunk))
        await real_settle(lim, chunk)

    monkeypatch.setattr(batch_mod, "_settle_redis", counted)
    await settle_batch(limiter, more)
    assert sent == [2, 2, 1]
    assert await limiter.open_holds(ORG) == 0


async def test_free_requests_are_left_out(make_limiter: LimiterFactory) -> None:
    limiter = make_limiter()
    request = req(key_id=KEY, org_id=ORG, hold_nano=500)
    await limiter.admit(request)
    # cost 0: the request path settled it (no unflushed hold); a batch must not touch it
    await settle_batch(limiter, [Settled(request.request_id, KEY, ORG, 0)])
    assert await limiter.open_holds(ORG) == 500
