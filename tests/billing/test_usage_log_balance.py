"""Unflushed spend is never invisible (EZAT_USAGE_COMMIT=group): between a request's answer and
the flusher storing its row, the dashboard's balance and the limiter's admissions count it as the
open hold it is, and once the row is stored they count the row; at no moment is it counted by
neither (the spend would disappear and reappear)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from billing import usage_log
from billing.dashboard_selectors import balances
from gateway import limits
from gateway.limits.base import AdmitRequest, InsufficientFunds
from tests.billing.factories import make_org
from tests.billing.test_recorder import usage
from tests.billing.test_usage_log import COST, Outage

pytestmark = pytest.mark.django_db(transaction=True)

CREDIT = 100 * COST
HOLD = 4 * COST


@pytest.fixture
def group_log(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    settings.EZAT_USAGE_COMMIT = "group"
    settings.EZAT_MONEY_RESEED_SECONDS = 0  # every admission rereads the database
    limits.reset_limiter()
    made = usage_log.UsageLog(tmp_path / "log")
    monkeypatch.setattr(usage_log, "usage_log", made)
    yield made
    made.close()
    limits.reset_limiter()


def admit_request(org_id: int, request_id: str, hold: int) -> AdmitRequest:
    return AdmitRequest(
        request_id=request_id,
        key_id=1,
        org_id=org_id,
        rpm_limit=1000,
        spend_cap_nano=None,
        hold_nano=hold,
        candidates=(),
    )


def available(org: Any) -> int:
    from django.db import connections

    try:
        return balances(org).available_nano
    finally:
        connections.close_all()


def test_the_balance_counts_the_spend_between_the_answer_and_the_flush(
    group_log: usage_log.UsageLog,
) -> None:
    org = make_org(credit_nano=CREDIT)
    outage = Outage(group_log)  # the flusher cannot store the row yet
    lim = limits.get_limiter()
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:  # the dashboard, read over and over across the flush
        from django.db import connections

        try:
            while not stop.is_set():
                seen.append(balances(org).available_nano)
        finally:
            connections.close_all()

    async def scenario() -> None:
        await lim.admit(admit_request(org.pk, "lim-bal", HOLD))
        assert await asyncio.to_thread(available, org) == CREDIT - HOLD
        cost, unflushed = await usage_log.record(usage(org.pk, "bal-1"), "lim-bal")
        assert (cost, unflushed) == (COST, True)
        await lim.hold_unflushed("lim-bal", key_id=1, org_id=org.pk, cost_nano=cost)

        # Answered, not stored: the dashboard and admissions (after a reseed) count the cost.
        assert await asyncio.to_thread(available, org) == CREDIT - COST
        await lim.admit(admit_request(org.pk, "probe-1", 1))
        await lim.wait_background()  # the reseed (from a database without the row) is done
        await lim.settle("probe-1", key_id=1, org_id=org.pk, hold_nano=1, cost_nano=0)
        with pytest.raises(InsufficientFunds):
            await lim.admit(admit_request(org.pk, "probe-2", CREDIT - COST + 1))
        await lim.admit(admit_request(org.pk, "probe-3", CREDIT - COST))
        await lim.settle("probe-3", key_id=1, org_id=org.pk, hold_nano=1, cost_nano=0)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            outage.down = False
            await group_log.wait_flushed()  # stored, then settled (the gateway's settler)
            await asyncio.sleep(0.05)  # a few samples after the flush too
        finally:
            stop.set()
            await asyncio.to_thread(sampler.join, 30)

        # Stored and settled: the row counts, the hold is gone, and admissions agree.
        assert await limits.get_limiter().open_holds(org.pk) == 0
        assert await asyncio.to_thread(available, org) == CREDIT - COST
        admitted = await lim.admit(admit_request(org.pk, "after", 1))
        assert admitted.balance_nano == CREDIT - COST

    asyncio.run(scenario())
    assert seen, "the dashboard was never read during the flush"
    # Counted once or (for the instant between the INSERT and the settle) twice: never 0 times.
    assert max(seen) <= CREDIT - COST, sorted(set(seen))
