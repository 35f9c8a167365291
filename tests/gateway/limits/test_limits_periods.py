"""Spend caps per period (issue 19): a key's cap counts per UTC month (the default), per UTC day
or in total. One contract, both implementations (local, Redis with the lean client, redis-py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.limits.base import InsufficientFunds
from gateway.limits.seed import DbMoneySource
from tests.gateway.limits.conftest import T0, req

HOLD = 1_000


async def refused(coro: Any) -> InsufficientFunds:
    with pytest.raises(InsufficientFunds) as info:
        await coro
    return info.value


async def test_daily_cap_counts_the_utc_day_and_resets_at_midnight(
    make_limiter, clock, money
) -> None:
    lim = make_limiter()
    money.key[(1, "20250310")] = 4 * HOLD  # spent today (T0 is 2025-03-10 12:00 UTC)
    money.key[(1, "202503")] = 40 * HOLD  # the month's spend does not count for a daily cap
    day = {"spend_cap_nano": 5 * HOLD, "cap_period": "day"}
    await lim.admit(req(hold_nano=HOLD, **day))
    err = await refused(lim.admit(req(hold_nano=1, **day)))
    assert (err.scope, err.period) == ("key_cap", "day")
    clock.now = T0 + 12 * 3600  # 2025-03-11 00:00:00 UTC: a new day, nothing spent
    assert time.strftime("%Y%m%d", time.gmtime(clock.now)) == "20250311"
    await lim.admit(req(hold_nano=HOLD, **day))
    # (yesterday's hold lapsed long ago: 12 h > EZAT_HOLD_TTL_SECONDS) 1_000 + 4_000 = the cap
    await lim.admit(req(hold_nano=4 * HOLD, **day))
    await refused(lim.admit(req(hold_nano=1, **day)))


async def test_settle_charges_the_day_of_a_daily_capped_key(make_limiter, money) -> None:
    lim = make_limiter()
    day = {"spend_cap_nano": 3 * HOLD, "cap_period": "day"}
    first = req(hold_nano=HOLD, **day)
    await lim.admit(first)
    for _ in range(2):  # idempotent
        await lim.settle(
            first.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=2 * HOLD + 500
        )
    await refused(lim.admit(req(hold_nano=501, **day)))
    await lim.admit(req(hold_nano=500, **day))


async def test_total_cap_never_resets(make_limiter, clock, money) -> None:
    lim = make_limiter()
    money.key[(1, "total")] = 9 * HOLD
    total = {"spend_cap_nano": 10 * HOLD, "cap_period": "total"}
    a = req(hold_nano=HOLD, **total)
    await lim.admit(a)
    await refused(lim.admit(req(hold_nano=1, **total)))
    await lim.settle(a.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=HOLD // 2)
    b = req(hold_nano=HOLD // 2, **total)
    await lim.admit(b)  # 9_500 spent + 500 held = the cap
    await lim.settle(b.request_id, key_id=1, org_id=1, hold_nano=HOLD // 2, cost_nano=HOLD // 2)
    money.key[(1, "total")] = 10 * HOLD  # the database has both records by now
    clock.now = T0 + 40 * 86400  # next month, next day: a total does not reset
    err = await refused(lim.admit(req(hold_nano=1, **total)))
    assert err.period == "total"


async def test_a_key_changing_period_is_counted_in_both(make_limiter, money) -> None:
    """Settling needs no knowledge of the key's period: a key whose cap moved from monthly to
    daily (the key cache refreshed mid-request) is charged in every loaded period."""
    lim = make_limiter()
    month = {"spend_cap_nano": 10 * HOLD, "cap_period": "month"}
    day = {"spend_cap_nano": 10 * HOLD, "cap_period": "day"}
    await lim.admit(req(hold_nano=HOLD, **day))  # loads the day's state
    a = req(hold_nano=HOLD, **month)
    await lim.admit(a)
    await lim.settle(a.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=7 * HOLD)
    # day: 7_000 spent + 1_000 held (the first request): 2_000 left
    await refused(lim.admit(req(hold_nano=2 * HOLD + 1, **day)))
    # month: 7_000 spent + 1_000 held: 2_000 left
    await refused(lim.admit(req(hold_nano=2 * HOLD + 1, **month)))
    await lim.admit(req(hold_nano=2 * HOLD, **month))


async def test_open_holds_per_org(make_limiter, money) -> None:
    lim = make_limiter()
    money.org[2] = 10**12
    assert await lim.open_holds(1) == 0
    a = req(hold_nano=HOLD)
    await lim.admit(a)
    await lim.admit(req(hold_nano=2 * HOLD))
    await lim.admit(req(hold_nano=5 * HOLD, org_id=2, key_id=9))
    assert await lim.open_holds(1) == 3 * HOLD
    assert await lim.open_holds(2) == 5 * HOLD
    await lim.settle(a.request_id, key_id=1, org_id=1, hold_nano=HOLD, cost_nano=300)
    assert await lim.open_holds(1) == 2 * HOLD


async def test_open_holds_forget_expired_holds(make_limiter, clock, settings, money) -> None:
    settings.EZAT_HOLD_TTL_SECONDS = 1
    lim = make_limiter()
    await lim.admit(req(hold_nano=HOLD))
    clock.advance(2)
    await lim.admit(req(hold_nano=2 * HOLD))  # an admission purges expired holds
    assert await lim.open_holds(1) == 2 * HOLD


@pytest.mark.parametrize("period", ["day", "total"])
async def test_period_spend_seeded_from_the_database(make_limiter, org_rows, period) -> None:
    """org_rows: the key spent 8_000 this month (today) and 2_000 in an earlier month."""
    lim = make_limiter(DbMoneySource(), time.time)
    ids = {"org_id": org_rows["org"].pk, "key_id": org_rows["key"].pk}
    spent = 8_000 if period == "day" else 10_000
    cap = {"spend_cap_nano": spent + 1_500, "cap_period": period}
    await lim.admit(req(**ids, hold_nano=1_500, **cap))
    err = await refused(lim.admit(req(**ids, hold_nano=1, **cap)))
    assert (err.scope, err.period) == ("key_cap", period)


# --- open holds on the dashboard's available balance ------------------------------------------
@pytest.mark.parametrize("backend", ["local", "redis"])
async def test_available_balance_subtracts_open_holds(backend, org_rows, settings) -> None:
    """billing's Balances (the overview and balance pages): ledger − unreconciled − open holds,
    read through the reader the gateway app registers (billing never imports the limiter)."""
    from billing import dashboard_selectors as sel
    from gateway.limits import get_limiter, open_holds_nano, reset_limiter
    from gateway.limits.redis import RedisLimiter
    from tests.gateway.limits.conftest import REDIS_URL, delete_prefix, new_prefix, orm

    settings.REDIS_URL = REDIS_URL if backend == "redis" else ""
    settings.EZAT_REDIS_PREFIX = prefix = new_prefix()
    reset_limiter()
    sel.set_open_holds_reader(open_holds_nano)  # what gateway.apps does at startup
    lim = get_limiter()
    org = org_rows["org"]
    try:
        before = await orm(lambda: sel.balances(org))
        assert (before.ledger_nano, before.unreconciled_nano, before.held_nano) == (
            10_000,
            3_000,
            0,
        )
        assert before.available_nano == 7_000
        a = req(org_id=org.pk, key_id=org_rows["key"].pk, hold_nano=2_500)
        await lim.admit(a)
        held = await orm(lambda: sel.balances(org))
        assert held.held_nano == 2_500 and held.available_nano == 4_500
        await lim.settle(a.request_id, key_id=a.key_id, org_id=org.pk, hold_nano=2_500, cost_nano=0)
        assert (await orm(lambda: sel.balances(org))).available_nano == 7_000
    finally:
        await lim.aclose()  # type: ignore[attr-defined]
        if isinstance(lim, RedisLimiter):
            await delete_prefix(prefix)
        reset_limiter()


def test_open_holds_unavailable_when_redis_is_down(settings) -> None:
    from billing.dashboard_selectors import Balances
    from gateway.limits import open_holds_nano, reset_limiter
    from tests.gateway.limits.conftest import DEAD_REDIS_URL

    settings.REDIS_URL = DEAD_REDIS_URL
    reset_limiter()
    try:
        assert open_holds_nano(1) is None
    finally:
        reset_limiter()
    # the page then shows the balance without holds rather than failing
    assert Balances(ledger_nano=10, unreconciled_nano=3, held_nano=None).available_nano == 7
