"""One contract, two implementations: every test runs on LocalLimiter and on RedisLimiter."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from django.db import OperationalError

from gateway.limits import get_limiter, notify_credit, reset_limiter
from gateway.limits.base import (
    Admitted,
    CapacityExhausted,
    InsufficientFunds,
    LimiterUnavailable,
    RateInfo,
    RateLimited,
)
from gateway.limits.local import LocalLimiter
from gateway.limits.redis import RedisLimiter
from gateway.limits.seed import DbMoneySource
from tests.gateway.limits.conftest import (
    REDIS_URL,
    T0,
    FakeClock,
    delete_prefix,
    new_prefix,
    orm,
    req,
)

HOLD = 1_000


async def refused(coro: Any, exc: type[Exception]) -> Any:
    with pytest.raises(exc) as info:
        await coro
    return info.value


# --- requests per minute ---------------------------------------------------------------------
async def test_rpm_exact_then_reset_next_minute(make_limiter, clock: FakeClock) -> None:
    lim = make_limiter()
    for i in range(5):
        admitted = await lim.admit(req(rpm_limit=5))
        assert admitted.rate == RateInfo(limit=5, remaining=4 - i, reset_at=T0 + 60)
        assert admitted.deployment_id is None
    err = await refused(lim.admit(req(rpm_limit=5)), RateLimited)
    assert err.rate == RateInfo(limit=5, remaining=0, reset_at=T0 + 60)
    assert err.retry_after == 50  # the clock is at T0 + 10

    clock.now = T0 + 60  # a new calendar minute: a fresh window
    admitted = await lim.admit(req(rpm_limit=5))
    assert admitted.rate == RateInfo(limit=5, remaining=4, reset_at=T0 + 120)


async def test_retry_after_is_an_integer_of_at_least_one(make_limiter, clock: FakeClock) -> None:
    lim = make_limiter()
    await lim.admit(req(rpm_limit=1))
    clock.now = T0 + 59.7
    err = await refused(lim.admit(req(rpm_limit=1)), RateLimited)
    assert err.retry_after == 1
    assert isinstance(err.retry_after, int)
    clock.now = T0 + 0.5 + 60
    await lim.admit(req(rpm_limit=1))
    err = await refused(lim.admit(req(rpm_limit=1)), RateLimited)
    assert err.retry_after == 60  # 59.5 s left, rounded up


async def test_free_requests_count_and_keys_are_separate(make_limiter) -> None:
    lim = make_limiter()
    await lim.admit(req(rpm_limit=3, hold_nano=0))  # count_tokens
    await lim.admit(req(rpm_limit=3, hold_nano=HOLD))
    await lim.admit(req(rpm_limit=3, hold_nano=0))
    await refused(lim.admit(req(rpm_limit=3)), RateLimited)
    other = await lim.admit(req(key_id=2, rpm_limit=3))
    assert other.rate.remaining == 2


# --- money: key cap --------------------------------------------------------------------------
async def test_cap_covering_n_holds_admits_exactly_n_concurrent(make_limiter) -> None:
    lim = make_limiter()
    results = await asyncio.gather(
        *(lim.admit(req(hold_nano=HOLD, spend_cap_nano=3 * HOLD)) for _ in range(8)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Admitted) for r in results) == 3
    errors = [r for r in results if not isinstance(r, Admitted)]
    assert len(errors) == 5
    assert all(isinstance(e, InsufficientFunds) and e.scope == "key_cap" for e in errors)


async def test_settle_releases_the_hold_and_charges_once(make_limiter) -> None:
    lim = make_limiter()
    cap = 3 * HOLD
    first = req(hold_nano=HOLD, spend_cap_nano=cap)
    await lim.admit(first)
    for _ in range(2):  # a retried settle must not charge twice
        await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=400)
    # spent 400, nothing held: exactly 2_600 is left under the cap
    await lim.admit(req(hold_nano=2_600, spend_cap_nano=cap))
    err = await refused(lim.admit(req(hold_nano=1, spend_cap_nano=cap)), InsufficientFunds)
    assert err.scope == "key_cap"


async def test_month_spend_seeded_per_calendar_month(make_limiter, clock, money) -> None:
    lim = make_limiter()
    money.key[(1, "202503")] = 5 * HOLD
    await refused(lim.admit(req(hold_nano=HOLD, spend_cap_nano=5 * HOLD)), InsufficientFunds)
    clock.now = T0 + 22 * 86400  # 2025-04-01: a new month, nothing spent yet
    assert time.strftime("%Y%m", time.gmtime(clock.now)) == "202504"
    await lim.admit(req(hold_nano=HOLD, spend_cap_nano=5 * HOLD))


async def test_hold_expires_but_a_late_settle_still_charges(make_limiter, clock, settings) -> None:
    settings.EZAT_HOLD_TTL_SECONDS = 1
    lim = make_limiter()
    cap = 2 * HOLD
    a = req(hold_nano=HOLD, spend_cap_nano=cap)
    await lim.admit(a)
    await lim.admit(req(hold_nano=HOLD, spend_cap_nano=cap))
    await refused(lim.admit(req(hold_nano=HOLD, spend_cap_nano=cap)), InsufficientFunds)
    clock.advance(2)  # both holds expired (a crashed process never settles)
    c = req(hold_nano=HOLD, spend_cap_nano=cap)
    await lim.admit(c)
    # `a` finishes after its hold lapsed: its cost still counts
    await lim.settle(a.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=500)
    # spent 500 + held 1_000 (c): 500 left
    await refused(lim.admit(req(hold_nano=501, spend_cap_nano=cap)), InsufficientFunds)
    await lim.admit(req(hold_nano=500, spend_cap_nano=cap))


# --- money: org balance ----------------------------------------------------------------------
async def test_org_balance_holds_and_settles(make_limiter, money) -> None:
    money.org[1] = 1_000
    lim = make_limiter()
    first = req(hold_nano=400)
    await lim.admit(first)
    await lim.admit(req(hold_nano=400))
    err = await refused(lim.admit(req(hold_nano=400)), InsufficientFunds)
    assert err.scope == "org_balance"
    assert err.rate.remaining == 998  # refused: the request was not counted
    await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=400, cost_nano=100)
    # base 900, held 400: exactly 500 available
    await lim.admit(req(hold_nano=500))
    await refused(lim.admit(req(hold_nano=1)), InsufficientFunds)


async def test_admission_returns_the_balance_it_checked(make_limiter, money) -> None:
    """Issue 16 item 4: x-ezat-balance-usd comes from the admission step itself (no extra
    round trip): the org's balance before this request's hold, after earlier settlements."""
    money.org[1] = 1_000
    lim = make_limiter()
    first = req(hold_nano=400)
    assert (await lim.admit(first)).balance_nano == 1_000
    # a live hold does not lower the balance (it is not charged yet) ...
    assert (await lim.admit(req(hold_nano=100))).balance_nano == 1_000
    await lim.settle(first.request_id, key_id=1, org_id=1, hold_nano=400, cost_nano=123)
    # ... a settlement does, by its cost
    assert (await lim.admit(req(hold_nano=100))).balance_nano == 877
    # a free request checks no money: no balance to report
    assert (await lim.admit(req(hold_nano=0))).balance_nano is None
    # exact beyond a double's integers (a Lua number would print 1e+16)
    money.org[2] = 10**16 + 7
    assert (await lim.admit(req(org_id=2, hold_nano=1))).balance_nano == 10**16 + 7


async def test_org_balance_is_shared_by_the_org_keys(make_limiter, money) -> None:
    money.org[1] = 2 * HOLD
    lim = make_limiter()
    await lim.admit(req(key_id=1, hold_nano=HOLD))
    await lim.admit(req(key_id=2, hold_nano=HOLD))
    err = await refused(lim.admit(req(key_id=3, hold_nano=1)), InsufficientFunds)
    assert err.scope == "org_balance"


async def test_key_cap_is_reported_before_org_balance(make_limiter, money) -> None:
    money.org[1] = 0
    lim = make_limiter()
    err = await refused(lim.admit(req(hold_nano=HOLD, spend_cap_nano=HOLD - 1)), InsufficientFunds)
    assert err.scope == "key_cap"


async def test_free_request_skips_money_entirely(make_limiter, money) -> None:
    money.org[1] = 0
    lim = make_limiter()
    await lim.admit(req(hold_nano=0, spend_cap_nano=0))
    assert money.calls == 0  # not even seeded


# --- refusals consume nothing ----------------------------------------------------------------
async def test_money_refusal_consumes_no_rate_and_no_slot(make_limiter) -> None:
    lim = make_limiter()
    for _ in range(3):
        await refused(
            lim.admit(req(rpm_limit=2, hold_nano=2, spend_cap_nano=1, candidates=((7, 1),))),
            InsufficientFunds,
        )
    ok = await lim.admit(req(rpm_limit=2, hold_nano=1, spend_cap_nano=1, candidates=((7, 1),)))
    assert (ok.deployment_id, ok.rate.remaining) == (7, 1)


async def test_capacity_refusal_consumes_no_rate_and_no_hold(make_limiter) -> None:
    lim = make_limiter()
    busy = req(key_id=9, candidates=((7, 1),))
    await lim.admit(busy)
    for _ in range(3):
        err = await refused(
            lim.admit(req(rpm_limit=2, hold_nano=HOLD, spend_cap_nano=HOLD, candidates=((7, 1),))),
            CapacityExhausted,
        )
        assert err.retry_after == 1 and err.rate.remaining == 2
    await lim.release_slot(busy.request_id, 7)
    ok = await lim.admit(
        req(rpm_limit=2, hold_nano=HOLD, spend_cap_nano=HOLD, candidates=((7, 1),))
    )
    assert (ok.deployment_id, ok.rate.remaining) == (7, 1)


async def test_rate_refusal_takes_no_hold_and_no_slot(make_limiter, clock, settings) -> None:
    settings.EZAT_SLOT_LEASE_SECONDS = 120  # the first request's slot outlives the jump
    lim = make_limiter()
    cap = 2 * HOLD
    await lim.admit(req(rpm_limit=1, hold_nano=HOLD, spend_cap_nano=cap, candidates=((7, 2),)))
    await refused(
        lim.admit(req(rpm_limit=1, hold_nano=HOLD, spend_cap_nano=cap, candidates=((7, 2),))),
        RateLimited,
    )
    clock.now = T0 + 60
    ok = await lim.admit(req(rpm_limit=1, hold_nano=HOLD, spend_cap_nano=cap, candidates=((7, 2),)))
    assert ok.deployment_id == 7
    assert await lim.in_flight([7]) == {7: 2}


# --- capacity --------------------------------------------------------------------------------
async def test_capacity_first_deployment_with_room(make_limiter) -> None:
    lim = make_limiter()
    cands = ((1, 1), (2, 2))
    got = [(await lim.admit(req(candidates=cands))) for _ in range(3)]
    assert [a.deployment_id for a in got] == [1, 2, 2]
    last = req(candidates=cands)
    err = await refused(lim.admit(last), CapacityExhausted)
    assert err.retry_after == 1
    assert await lim.in_flight([1, 2, 3]) == {1: 1, 2: 2, 3: 0}


async def test_acquire_and_release_slots_for_failover(make_limiter) -> None:
    lim = make_limiter()
    a = await lim.admit(req(request_id="a", candidates=((1, 1),)))
    assert a.deployment_id == 1
    assert await lim.acquire_slot("b", 1, 1) is False
    assert await lim.acquire_slot("a", 2, 1) is True  # failover of `a` to deployment 2
    await lim.release_slot("a", 1)
    await lim.release_slot("a", 1)  # idempotent
    assert await lim.in_flight([1, 2]) == {1: 0, 2: 1}
    assert await lim.acquire_slot("b", 1, 1) is True
    assert await lim.acquire_slot("b", 1, 1) is True  # already holding it: refreshed, not doubled
    assert await lim.in_flight([1]) == {1: 1}


async def test_settle_releases_the_slot_in_the_same_step(make_limiter) -> None:
    lim = make_limiter()
    first = req(request_id="a", hold_nano=HOLD, candidates=((1, 1),))
    assert (await lim.admit(first)).deployment_id == 1
    await refused(
        lim.admit(req(request_id="b", hold_nano=HOLD, candidates=((1, 1),))), CapacityExhausted
    )
    await lim.settle(
        "a", key_id=first.key_id, org_id=first.org_id, hold_nano=HOLD, cost_nano=10, deployment_id=1
    )
    assert await lim.in_flight([1]) == {1: 0}
    assert (
        await lim.admit(req(request_id="b", hold_nano=HOLD, candidates=((1, 1),)))
    ).deployment_id == 1


async def test_free_settle_with_a_slot_releases_it(make_limiter) -> None:
    lim = make_limiter()
    assert (
        await lim.admit(req(request_id="a", hold_nano=0, candidates=((1, 1),)))
    ).deployment_id == 1
    await lim.settle("a", key_id=1, org_id=1, hold_nano=0, cost_nano=0, deployment_id=1)
    assert await lim.in_flight([1]) == {1: 0}


async def test_slot_leases_expire(make_limiter, clock, settings) -> None:
    settings.EZAT_SLOT_LEASE_SECONDS = 1
    lim = make_limiter()
    await lim.admit(req(candidates=((1, 1),)))  # a process that died holding the slot
    await refused(lim.admit(req(candidates=((1, 1),))), CapacityExhausted)
    clock.advance(2)
    assert (await lim.admit(req(candidates=((1, 1),)))).deployment_id == 1


# --- seeding protocol ------------------------------------------------------------------------
async def test_settle_during_a_seed_is_not_lost(make_limiter, money) -> None:
    """The DB read of a seed misses a record settled meanwhile: the write subtracts it."""
    money.org[1] = 1_000
    money.key[(1, "202503")] = 0
    money.gate = asyncio.Event()
    lim = make_limiter()
    pending = asyncio.create_task(lim.admit(req(hold_nano=100, spend_cap_nano=1_000)))
    for _ in range(200):
        if money.calls:
            break
        await asyncio.sleep(0.005)
    await lim.settle("elsewhere", key_id=1, org_id=1, hold_nano=0, cost_nano=300)
    money.gate.set()
    await pending
    # org: 1_000 − 300 − 100 held; key: 300 spent + 100 held of 1_000
    await lim.admit(req(hold_nano=600, spend_cap_nano=1_000))
    await refused(lim.admit(req(hold_nano=1, spend_cap_nano=1_000)), InsufficientFunds)


async def test_seed_failure_fails_money_closed(make_limiter, money) -> None:
    money.error = OperationalError("database is down")
    lim = make_limiter()
    await refused(lim.admit(req(hold_nano=HOLD)), LimiterUnavailable)
    await lim.admit(req(hold_nano=0))  # free requests do not need money state


async def test_seed_from_db_org_available(make_limiter, org_rows) -> None:
    lim = make_limiter(DbMoneySource(), time.time)
    org = org_rows["org"]
    await lim.admit(req(org_id=org.pk, key_id=org_rows["key"].pk, hold_nano=7_000))
    err = await refused(
        lim.admit(req(org_id=org.pk, key_id=org_rows["key"].pk, hold_nano=1)), InsufficientFunds
    )
    assert err.scope == "org_balance"


async def test_seed_from_db_key_month_spend(make_limiter, org_rows) -> None:
    lim = make_limiter(DbMoneySource(), time.time)
    ids = {"org_id": org_rows["org"].pk, "key_id": org_rows["key"].pk}
    cap = org_rows["key_month_spent"] + 2_000  # 8_000 spent this month: 2_000 left
    await lim.admit(req(**ids, hold_nano=2_000, spend_cap_nano=cap))
    err = await refused(lim.admit(req(**ids, hold_nano=1, spend_cap_nano=cap)), InsufficientFunds)
    assert err.scope == "key_cap"


async def test_reseed_heals_drift_and_keeps_holds(make_limiter, org_rows, settings) -> None:
    from accounts.models import Organization

    settings.EZAT_MONEY_RESEED_SECONDS = 0
    lim = make_limiter(DbMoneySource(), time.time)
    ids = {"org_id": org_rows["org"].pk, "key_id": org_rows["key"].pk}
    await lim.admit(req(**ids, hold_nano=7_000))
    await lim.wait_background()
    # credit made by another process without a notification (balance 10_000 -> 15_000)
    await orm(lambda: Organization.objects.filter(pk=ids["org_id"]).update(balance_nano=15_000))
    await refused(lim.admit(req(**ids, hold_nano=1)), InsufficientFunds)  # claims a reseed
    await lim.wait_background()
    # base 15_000 − 3_000 unreconciled = 12_000; the 7_000 hold is still held: 5_000 left
    await lim.admit(req(**ids, hold_nano=5_000))
    await refused(lim.admit(req(**ids, hold_nano=1)), InsufficientFunds)


async def test_notification_also_triggers_a_reread(make_limiter, money, settings) -> None:
    """A reseed that read the DB after the grant committed but wrote before its notification
    arrived would count the credit twice; the notification marks the state for a reread that
    heals it."""
    from gateway.limits.redis_conn import notify_credit_redis

    settings.EZAT_MONEY_RESEED_SECONDS = 3600
    money.org[1] = 1_500  # the DB already includes a 500 grant
    lim = make_limiter()
    await lim.admit(req(hold_nano=1_000))
    if isinstance(lim, LocalLimiter):
        lim.notify_credit(1, 500)
    else:
        notify_credit_redis(REDIS_URL, make_limiter.prefix, 1, 500)
    await lim.admit(req(hold_nano=1))  # base 2_000 for now; claims the reread
    await lim.wait_background()
    assert money.calls == 2
    # healed: base 1_500, held 1_001
    await refused(lim.admit(req(hold_nano=500)), InsufficientFunds)
    await lim.admit(req(hold_nano=499))


@pytest.mark.parametrize("backend", ["local", "redis"])
async def test_notify_credit_makes_a_grant_spendable_at_once(backend, org_rows, settings) -> None:
    from billing.services import grant_credit

    settings.EZAT_MONEY_RESEED_SECONDS = 3600  # only the notification can explain new money
    settings.REDIS_URL = REDIS_URL if backend == "redis" else ""
    settings.EZAT_REDIS_PREFIX = prefix = new_prefix()
    reset_limiter()
    lim = get_limiter()
    assert isinstance(lim, RedisLimiter if backend == "redis" else LocalLimiter)
    assert get_limiter() is lim
    try:
        ids = {"org_id": org_rows["org"].pk, "key_id": org_rows["key"].pk}
        await lim.admit(req(**ids, hold_nano=7_000))
        await refused(lim.admit(req(**ids, hold_nano=500)), InsufficientFunds)
        await orm(lambda: grant_credit(org=org_rows["org"], amount_nano=500))  # + on_commit
        await lim.admit(req(**ids, hold_nano=500))
        await refused(lim.admit(req(**ids, hold_nano=1)), InsufficientFunds)
        notify_credit(987654321, 1_000)  # an org with no live state: nothing to do, no error
    finally:
        await lim.aclose()  # type: ignore[attr-defined]
        if isinstance(lim, RedisLimiter):
            await delete_prefix(prefix)
        reset_limiter()


async def test_get_limiter_follows_settings(settings) -> None:
    settings.REDIS_URL = ""
    reset_limiter()
    try:
        assert isinstance(get_limiter(), LocalLimiter)
        settings.REDIS_URL = REDIS_URL
        assert isinstance(get_limiter(), LocalLimiter)  # a process singleton until reset
        reset_limiter()
        assert isinstance(get_limiter(), RedisLimiter)
    finally:
        reset_limiter()
