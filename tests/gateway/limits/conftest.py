"""Fixtures for the limiter suites: a fake clock, both implementations, DB rows for seeding.

Redis tests run against the session's private server (db 15, tests/services.py) under a unique
key prefix per test and delete only their own keys: other suites share that server, so no FLUSHDB.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as redis_async

from gateway.limits.base import AdmitRequest
from gateway.limits.common import MoneySource
from gateway.limits.local import LocalLimiter
from gateway.limits.redis import RedisLimiter
from tests import services

REDIS_URL = services.redis_url(services.REDIS_DB_LIMITS)
DEAD_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
T0 = datetime(2025, 3, 10, 12, 0, 0, tzinfo=UTC).timestamp()  # the start of a UTC minute


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class StaticMoney:
    """Stands in for the DB where a test is about admission semantics, not about SQL (seeding
    from real rows is tested with DbMoneySource). `gate` lets a test hold a seed mid-read."""

    def __init__(self) -> None:
        self.org: dict[int, int] = {}
        # (key id, period id: "YYYYMM", "YYYYMMDD" or "total") -> spent
        self.key: dict[tuple[int, str], int] = {}
        self.calls = 0
        self.gate: asyncio.Event | None = None
        self.error: BaseException | None = None

    async def _enter(self) -> None:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error

    async def org_available(self, org_id: int) -> int:
        await self._enter()
        return self.org.get(org_id, 0)

    async def key_month_spent(self, key_id: int, start: datetime, end: datetime) -> int:
        await self._enter()
        if start.year <= 2000:  # a total: common.period_bounds("total")
            label = "total"
        elif (end - start).days == 1:
            label = start.strftime("%Y%m%d")
        else:
            label = start.strftime("%Y%m")
        return self.key.get((key_id, label), 0)

    def close(self) -> None:
        pass


def req(**kw: Any) -> AdmitRequest:
    fields: dict[str, Any] = {
        "request_id": uuid.uuid4().hex,
        "key_id": 1,
        "org_id": 1,
        "rpm_limit": 1000,
        "spend_cap_nano": None,
        "hold_nano": 0,
        "candidates": (),
    }
    fields.update(kw)
    return AdmitRequest(**fields)


async def delete_prefix(prefix: str) -> None:
    client = redis_async.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def orm(fn: Callable[[], Any]) -> Any:
    """Run ORM code from an async test in a worker thread, closing that thread's connection
    (a session left open would block dropping the PostgreSQL test database)."""
    from django.db import connections

    def run() -> Any:
        try:
            return fn()
        finally:
            connections.close_all()

    return await asyncio.to_thread(run)


def new_prefix() -> str:
    # Already a hash tag (the limiter keeps it as it is): tests name the keys it writes.
    return f"{{ezat-test:{uuid.uuid4().hex[:12]}}}:"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 + 10)


@pytest.fixture
def money() -> StaticMoney:
    money = StaticMoney()
    money.org[1] = 10**12
    return money


LimiterFactory = Callable[..., Any]


@pytest.fixture(params=["local", "redis", "redis-py"])
async def make_limiter(
    request: pytest.FixtureRequest, clock: FakeClock, money: StaticMoney
) -> AsyncIterator[LimiterFactory]:
    """Builds limiters of the parametrised kind; several Redis ones share one prefix (= processes
    sharing one Redis)."""
    kind = request.param
    prefix = new_prefix()
    made: list[Any] = []

    def factory(
        money_source: MoneySource | None = None, clock_fn: Callable[[], float] | None = None
    ) -> Any:
        source = money_source or money
        tick = clock_fn or clock
        limiter: Any
        if kind == "local":
            limiter = LocalLimiter(money=source, clock=tick)
        else:
            # "redis": the lean pipelined client for the per-request scripts (production);
            # "redis-py": every call through redis-py (rediss:// and unix:// URLs).
            limiter = RedisLimiter(
                REDIS_URL,
                prefix=prefix,
                money=source,
                clock=tick,
                lean_client=kind == "redis",
            )
        made.append(limiter)
        return limiter

    factory.kind = kind  # type: ignore[attr-defined]
    factory.prefix = prefix  # type: ignore[attr-defined]
    yield factory
    for limiter in made:
        await limiter.aclose()  # also closes a DbMoneySource's connections
    if kind != "local":
        await delete_prefix(prefix)


@pytest.fixture
def org_rows(transactional_db: None) -> dict[str, Any]:
    """An org with credit, a reconciled and an unreconciled usage record, and a key.

    balance 10_000 (= credit 17_000 − one debit of 7_000 reconciling a 5_000 record of this month
    and a 2_000 record of last month); an unreconciled record of 3_000, so the money available is
    7_000. The key spent 3_000 + 5_000 this month (reconciled or not) and 2_000 last month.
    """
    from datetime import timedelta

    from django.utils import timezone

    from accounts.models import ApiKey, Organization
    from billing.models import LedgerEntry, UsageRecord

    suffix = uuid.uuid4().hex[:8]
    org = Organization.objects.create(name=f"limits-{suffix}")
    key = ApiKey.objects.create(org=org, prefix="ezat_sk_t", key_hash=uuid.uuid4().hex * 2)
    credit = LedgerEntry.objects.create(
        org=org, kind=LedgerEntry.Kind.CREDIT, amount_nano=17_000, reference=f"c-{suffix}"
    )
    debit = LedgerEntry.objects.create(
        org=org, kind=LedgerEntry.Kind.USAGE, amount_nano=-7_000, reference=f"u-{suffix}"
    )
    Organization.objects.filter(pk=org.pk).update(
        balance_nano=credit.amount_nano + debit.amount_nano
    )
    now = timezone.now()

    def usage(cost: int, **extra: Any) -> Any:
        return UsageRecord.objects.create(
            request_id=f"r-{uuid.uuid4().hex}",
            org=org,
            api_key=key,
            api="messages",
            model_id="m",
            model_name="m",
            cost_nano=cost,
            prices={},
            started_at=now,
            **extra,
        )

    usage(3_000)
    usage(5_000, ledger_entry=debit)
    old = usage(2_000, ledger_entry=debit)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    UsageRecord.objects.filter(pk=old.pk).update(created_at=month_start - timedelta(days=3))
    return {"org": org, "key": key, "available": 7_000, "key_month_spent": 8_000}
