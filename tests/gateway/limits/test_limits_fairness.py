"""Tenant fairness, one contract for both limiters: key and org concurrency limits, the share
rule on each deployment, and slot leases kept alive by a heartbeat (and lapsing without one)."""

from __future__ import annotations

import pytest

from gateway.limits.base import (
    CapacityExhausted,
    ConcurrencyLimited,
    FairShareLimited,
    InsufficientFunds,
)
from gateway.limits.common import share_caps
from tests.gateway.limits.conftest import FakeClock, req
from tests.gateway.limits.test_limits_contract import HOLD, refused


async def settle(lim, rid: str, *, key_id: int = 1, org_id: int = 1, deployment_id=None) -> None:
    await lim.settle(
        rid, key_id=key_id, org_id=org_id, hold_nano=0, cost_nano=0, deployment_id=deployment_id
    )


def test_share_caps() -> None:
    assert share_caps(10, 0.5) == (5, 9)  # 10 % headroom kept from a lone org
    assert share_caps(100, 0.5) == (50, 90)
    assert share_caps(1, 0.5) == (1, 1)  # never below one slot, never a headroom of all
    assert share_caps(2, 0.5) == (1, 1)
    assert share_caps(10, 1.0) == (10, 10)  # the rule off: no headroom either
    assert share_caps(10, 0.8) == (8, 9)


# --- key and org concurrency ----------------------------------------------------------------
async def test_key_concurrency_limit(make_limiter) -> None:
    lim = make_limiter()
    for rid in ("a", "b"):
        await lim.admit(req(request_id=rid, key_concurrency=2, candidates=((1, 50),)))
    err = await refused(
        lim.admit(req(request_id="c", key_concurrency=2, candidates=((1, 50),))),
        ConcurrencyLimited,
    )
    assert (err.scope, err.limit, err.retry_after) == ("key", 2, 1)
    # Another key of the same org is not limited by this key's limit.
    await lim.admit(req(request_id="x", key_id=2, key_concurrency=2, candidates=((1, 50),)))
    await settle(lim, "a", deployment_id=1)
    await lim.admit(req(request_id="c", key_concurrency=2, candidates=((1, 50),)))
    assert await lim.in_flight([1]) == {1: 3}


async def test_org_concurrency_limit_spans_keys(make_limiter) -> None:
    lim = make_limiter()
    await lim.admit(req(request_id="a", key_id=1, org_concurrency=2, candidates=((1, 50),)))
    await lim.admit(req(request_id="b", key_id=2, org_concurrency=2, candidates=((1, 50),)))
    err = await refused(
        lim.admit(req(request_id="c", key_id=3, org_concurrency=2, candidates=((1, 50),))),
        ConcurrencyLimited,
    )
    assert (err.scope, err.limit) == ("org", 2)
    await lim.admit(req(request_id="o", org_id=2, key_id=9, org_concurrency=2))  # another org
    await settle(lim, "b", key_id=2, deployment_id=1)
    await lim.admit(req(request_id="c", key_id=3, org_concurrency=2, candidates=((1, 50),)))


async def test_concurrency_refusal_takes_no_rate_hold_or_slot(make_limiter) -> None:
    lim = make_limiter()
    await lim.admit(req(request_id="a", rpm_limit=2, key_concurrency=1, candidates=((1, 5),)))
    await refused(
        lim.admit(
            req(
                request_id="b",
                rpm_limit=2,
                key_concurrency=1,
                hold_nano=HOLD,
                spend_cap_nano=HOLD,
                candidates=((1, 5),),
            )
        ),
        ConcurrencyLimited,
    )
    assert await lim.in_flight([1]) == {1: 1}
    await settle(lim, "a", deployment_id=1)
    # The refused request took neither the last request of the minute nor the cap's money.
    ok = await lim.admit(
        req(
            request_id="b",
            rpm_limit=2,
            key_concurrency=1,
            hold_nano=HOLD,
            spend_cap_nano=HOLD,
            candidates=((1, 5),),
        )
    )
    assert ok.rate.remaining == 0
    await refused(lim.admit(req(hold_nano=1, spend_cap_nano=HOLD, rpm_limit=9)), InsufficientFunds)


# --- the share rule --------------------------------------------------------------------------
async def test_a_lone_org_leaves_headroom_and_a_newcomer_caps_it(make_limiter) -> None:
    lim = make_limiter()
    cand = ((1, 10, 0.5),)
    for i in range(9):
        await lim.admit(req(request_id=f"a{i}", org_id=1, candidates=cand))
    err = await refused(
        lim.admit(req(request_id="a9", org_id=1, candidates=cand)), FairShareLimited
    )
    assert (err.cap, err.max_concurrency, err.shared) == (9, 10, False)
    # Another org finds the headroom free.
    assert (
        await lim.admit(req(request_id="b0", org_id=2, key_id=2, candidates=cand))
    ).deployment_id
    # Now two orgs are active: org 1 is capped at its share (5) until it is below it.
    for i in range(5):
        await settle(lim, f"a{i}", deployment_id=1)
    await lim.admit(req(request_id="a10", org_id=1, candidates=cand))  # 4 -> 5
    err = await refused(
        lim.admit(req(request_id="a11", org_id=1, candidates=cand)), FairShareLimited
    )
    assert (err.cap, err.shared) == (5, True)
    # Org 2 may still grow to its share.
    for i in range(1, 5):
        await lim.admit(req(request_id=f"b{i}", org_id=2, key_id=2, candidates=cand))
    assert await lim.in_flight([1]) == {1: 10}
    # Full for everyone: capacity, not a share refusal.
    await refused(
        lim.admit(req(request_id="c", org_id=3, key_id=3, candidates=cand)), CapacityExhausted
    )


async def test_a_refused_org_counts_as_active_for_the_window(
    make_limiter, clock: FakeClock, settings
) -> None:
    settings.EZAT_FAIR_SHARE_ACTIVE_SECONDS = 15
    lim = make_limiter()
    cand = ((1, 4, 0.5),)  # shared cap 2, lone cap 3
    for i in range(3):
        await lim.admit(req(request_id=f"a{i}", org_id=1, candidates=cand))
    await lim.admit(req(request_id="b", org_id=2, key_id=2, candidates=cand))
    await refused(
        lim.admit(req(request_id="c", org_id=3, key_id=3, candidates=cand)), CapacityExhausted
    )
    await settle(lim, "b", key_id=2, org_id=2, deployment_id=1)
    await settle(lim, "a0", deployment_id=1)
    await settle(lim, "a1", deployment_id=1)
    # Org 1 holds 1; org 3 was refused moments ago, so it is waiting: org 1 gets its share only.
    await lim.admit(req(request_id="a3", org_id=1, candidates=cand))
    err = await refused(
        lim.admit(req(request_id="a4", org_id=1, candidates=cand)), FairShareLimited
    )
    assert err.shared is True
    clock.advance(10)
    await lim.heartbeat()  # org 1's requests are alive
    clock.advance(6)  # org 3's refusal is 16 s old: org 1 is alone again
    await lim.admit(req(request_id="a4", org_id=1, candidates=cand))
    assert await lim.in_flight([1]) == {1: 3}


async def test_share_rule_falls_through_to_the_next_deployment(make_limiter) -> None:
    lim = make_limiter()
    cands = ((1, 2, 0.5), (2, 10, 0.5))
    got = [await lim.admit(req(request_id=f"a{i}", candidates=cands)) for i in range(3)]
    assert [a.deployment_id for a in got] == [1, 2, 2]  # lone cap on 1 is 1 (share_caps(2))


async def test_failover_slot_respects_the_share(make_limiter) -> None:
    lim = make_limiter()
    await lim.admit(req(request_id="b", org_id=2, key_id=2, candidates=((1, 4, 0.5),)))
    await lim.admit(req(request_id="a0", org_id=1, candidates=((1, 4, 0.5),)))
    await lim.admit(req(request_id="a1", org_id=1, candidates=((1, 4, 0.5),)))
    await lim.admit(req(request_id="a2", org_id=1, candidates=((9, 1),)))
    # Org 1 holds 2 of 4 with org 2 active: a failover of a2 to deployment 1 is refused.
    assert await lim.acquire_slot("a2", 1, 4, org_id=1, share=0.5) is False
    assert await lim.acquire_slot("b2", 1, 4, org_id=2, share=0.5) is True
    assert await lim.in_flight([1]) == {1: 4}


# --- leases and the heartbeat ----------------------------------------------------------------
async def test_leases_live_with_a_heartbeat_and_lapse_without(
    make_limiter, clock: FakeClock, settings
) -> None:
    settings.EZAT_SLOT_LEASE_SECONDS = 20
    lim = make_limiter()
    kw = {"key_concurrency": 1, "org_concurrency": 1, "candidates": ((1, 1),)}
    await lim.admit(req(request_id="a", **kw))
    for _ in range(6):  # a minute of a long stream, beating every 10 s
        clock.advance(10)
        await lim.heartbeat()
        assert await lim.in_flight([1]) == {1: 1}
        await refused(lim.admit(req(request_id="b", **kw)), ConcurrencyLimited)
    clock.advance(19)
    assert await lim.in_flight([1]) == {1: 1}
    clock.advance(2)  # no beat for 21 s: the process is gone, its leases lapse
    assert await lim.in_flight([1]) == {1: 0}
    assert (await lim.admit(req(request_id="b", **kw))).deployment_id == 1


@pytest.mark.parametrize("hold", [0, HOLD])
async def test_settle_releases_every_lease(make_limiter, hold: int) -> None:
    lim = make_limiter()
    kw = {"key_concurrency": 1, "org_concurrency": 1, "candidates": ((1, 1, 0.5),)}
    await lim.admit(req(request_id="a", hold_nano=hold, **kw))
    await lim.settle("a", key_id=1, org_id=1, hold_nano=hold, cost_nano=0, deployment_id=1)
    await lim.admit(req(request_id="b", hold_nano=hold, **kw))
    assert await lim.in_flight([1]) == {1: 1}


async def test_a_request_never_settled_stops_beating_after_the_hold_ttl(
    make_limiter, clock: FakeClock, settings
) -> None:
    """A bug that skips settle cannot pin a slot forever: leases are beaten for at most
    EZAT_HOLD_TTL_SECONDS (the bound slots had before heartbeats)."""
    settings.EZAT_SLOT_LEASE_SECONDS = 20
    lim = make_limiter()
    await lim.admit(req(request_id="lost", key_concurrency=1, candidates=((1, 1),)))
    settings.EZAT_HOLD_TTL_SECONDS = 0  # every lease is now older than the hold TTL
    clock.advance(10)
    await lim.heartbeat()
    clock.advance(11)
    assert await lim.in_flight([1]) == {1: 0}
    await lim.admit(req(request_id="next", key_concurrency=1, candidates=((1, 1),)))
