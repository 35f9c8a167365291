"""Limiter.hold_unflushed (EZAT_USAGE_COMMIT=group, billing/usage_log.py): a request whose usage
row is in the local log but not yet in the database keeps a hold of exactly its cost until the
flusher settles it. The balance, the key cap and the open holds count that spend the whole time,
and `charged` (the seeding arithmetic) moves only at the settle, once the row is stored.
Every test runs on LocalLimiter and on RedisLimiter (both clients)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.limits.base import CapacityExhausted, InsufficientFunds
from tests.gateway.limits.conftest import StaticMoney, req

HOLD = 1_000


async def refused(coro: Any, exc: type[Exception]) -> Any:
    with pytest.raises(exc) as info:
        await coro
    return info.value


async def test_the_unflushed_cost_stays_held_until_the_flusher_settles(
    make_limiter, money: StaticMoney
) -> None:
    money.org[1] = 2_000
    lim = make_limiter()
    first = req(hold_nano=HOLD, candidates=((1, 1),))
    await lim.admit(first)
    assert await lim.open_holds(1) == HOLD

    await lim.hold_unflushed(first.request_id, key_id=1, org_id=1, cost_nano=300, deployment_id=1)
    # The slot is free at once; the spend is held at its cost, not the worst case.
    assert await lim.in_flight([1]) == {1: 0}
    assert await lim.open_holds(1) == 300
    # available = 2_000 − 300 (unflushed) exactly
    second = req(hold_nano=1_700)
    await lim.admit(second)
    await refused(lim.admit(req(hold_nano=1)), InsufficientFunds)
    await lim.settle(second.request_id, key_id=1, org_id=1, hold_nano=1_700, cost_nano=0)

    # The row is stored: the flusher's settle charges the cost and the hold goes.
    await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=300, cost_nano=300)
    assert await lim.open_holds(1) == 0
    assert (await lim.admit(req(hold_nano=1))).balance_nano == 1_700
    await lim.admit(req(hold_nano=1_698))
    await refused(lim.admit(req(hold_nano=2)), InsufficientFunds)


async def test_the_key_cap_counts_unflushed_spend(make_limiter) -> None:
    lim = make_limiter()
    cap = 3 * HOLD
    first = req(hold_nano=HOLD, spend_cap_nano=cap)
    await lim.admit(first)
    await lim.hold_unflushed(first.request_id, key_id=1, org_id=1, cost_nano=800)
    await lim.admit(req(hold_nano=2_200, spend_cap_nano=cap))
    err = await refused(lim.admit(req(hold_nano=1, spend_cap_nano=cap)), InsufficientFunds)
    assert err.scope == "key_cap"


async def test_a_flusher_faster_than_the_request_settles_once(make_limiter) -> None:
    """The row may be stored (and settled) before the request itself ends: its hold_unflushed
    then only frees the slot, and the cost is charged once."""
    lim = make_limiter()
    cap = 2 * HOLD
    first = req(hold_nano=HOLD, spend_cap_nano=cap, candidates=((1, 1),))
    await lim.admit(first)
    await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=500, cost_nano=500)
    await lim.hold_unflushed(first.request_id, key_id=1, org_id=1, cost_nano=500, deployment_id=1)
    assert await lim.open_holds(1) == 0
    assert await lim.in_flight([1]) == {1: 0}
    await lim.admit(req(hold_nano=1_500, spend_cap_nano=cap))  # spent 500: 1_500 left exactly
    await refused(lim.admit(req(hold_nano=1, spend_cap_nano=cap)), InsufficientFunds)


async def test_an_unflushed_hold_outlives_the_hold_ttl(make_limiter, clock, settings) -> None:
    """A database outage longer than EZAT_HOLD_TTL_SECONDS must not drop unflushed spend
    out of the balance: it lives EZAT_USAGE_UNFLUSHED_HOLD_SECONDS."""
    settings.EZAT_HOLD_TTL_SECONDS = 1
    settings.EZAT_USAGE_UNFLUSHED_HOLD_SECONDS = 100
    lim = make_limiter()
    cap = 2 * HOLD
    first = req(hold_nano=HOLD, spend_cap_nano=cap)
    await lim.admit(first)
    await lim.hold_unflushed(first.request_id, key_id=1, org_id=1, cost_nano=HOLD)
    clock.advance(50)
    await lim.admit(req(hold_nano=HOLD, spend_cap_nano=cap))  # its hold lapses at once
    clock.advance(2)
    await refused(lim.admit(req(hold_nano=HOLD + 1, spend_cap_nano=cap)), InsufficientFunds)
    clock.advance(60)  # past the unflushed TTL: the hold lapses like any other
    await lim.admit(req(hold_nano=cap, spend_cap_nano=cap))


async def test_a_free_end_of_request_only_frees_the_slot(make_limiter) -> None:
    lim = make_limiter()
    first = req(request_id="a", hold_nano=HOLD, candidates=((1, 1),))
    await lim.admit(first)
    await refused(lim.admit(req(hold_nano=HOLD, candidates=((1, 1),))), CapacityExhausted)
    await lim.hold_unflushed("a", key_id=1, org_id=1, cost_nano=0, deployment_id=1)
    assert await lim.in_flight([1]) == {1: 0}
