"""The hot path's usage writer: group commit, duplicates, and no double insert on a retry."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import recorder
from billing.models import UsageRecord
from catalog.pricing import Prices, PriceSchedule, TokenCounts
from tests.billing.factories import make_org

pytestmark = pytest.mark.django_db(transaction=True)  # rows are written from worker threads

PRICES = Prices.from_decimals(Decimal(3), Decimal(15), Decimal("0.3"), Decimal("3.75"), Decimal(6))


def usage(org_id: int, request_id: str, output: int = 10) -> recorder.UsageData:
    return recorder.UsageData(
        request_id=request_id,
        org_id=org_id,
        key_id=None,
        api="messages",
        stream=False,
        model_id="anthropic/claude-sonnet-5-5",
        model_name="sonnet",
        deployment="d",
        tokens=TokenCounts(input=100, output=output, cache_read=1000, cache_write_5m=50),
        pricing=PriceSchedule.flat(PRICES),
        started_at=timezone.now(),
    )


def test_concurrent_records_share_batches_and_all_land(monkeypatch: pytest.MonkeyPatch) -> None:
    org = make_org()
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)

    async def scenario() -> list[int]:
        return await asyncio.gather(
            *(recorder.record_usage(usage(org.pk, f"req-{i}")) for i in range(60))
        )

    try:
        costs = asyncio.run(scenario())
    finally:
        writer.close()  # its thread's DB connection would block dropping the test database
    assert UsageRecord.objects.filter(org=org).count() == 60
    batches = writer.batch_sizes
    assert sum(batches) == 60 and len(batches) < 60  # group commit happened
    # 100×3000 + 10×15000 + 1000×300 + 50×3750 nano, computed once and stored with its prices
    assert set(costs) == {300_000 + 150_000 + 300_000 + 187_500}
    record = UsageRecord.objects.filter(org=org).first()
    assert record.cost_nano == 937_500 and record.prices["cacheRead"] == "0.3"


def test_reused_caller_request_id_gets_a_suffixed_second_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    org = make_org()
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)
    try:
        asyncio.run(recorder.record_usage(usage(org.pk, "dup")))
        asyncio.run(recorder.record_usage(usage(org.pk, "dup", output=20)))
    finally:
        writer.close()
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids[0] == "dup" and ids[1].startswith("dup~") and len(ids) == 2


def test_a_retried_insert_of_the_same_row_is_not_billed_twice() -> None:
    org = make_org()
    data = usage(org.pk, "same")
    fields = recorder._fields(data, data.cost_nano)
    recorder._insert_batch([dict(fields)])
    recorder._insert_batch([dict(fields)])  # e.g. the first commit's answer was lost
    assert UsageRecord.objects.filter(org=org).count() == 1


def test_a_lost_database_connection_is_replaced_and_nothing_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer's connection dies between two records (server restart, network, an operator
    terminating it): the next record reconnects and lands, once."""
    from django.db import connection

    org = make_org()
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)

    async def record_then_kill_then_record() -> None:
        await recorder.record_usage(usage(org.pk, "before"))
        pid = await asyncio.to_thread(_writer_backend_pid, writer)
        await asyncio.to_thread(_terminate, pid)
        await recorder.record_usage(usage(org.pk, "after"))

    try:
        if connection.vendor != "postgresql":
            pytest.skip("the event-loop writer is PostgreSQL's (SQLite writes from a thread)")
        asyncio.run(record_then_kill_then_record())
    finally:
        writer.close()
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids == ["after", "before"]


def _writer_backend_pid(writer: recorder.UsageWriter) -> int:
    assert writer._pg is not None and writer._pg._conn is not None
    return writer._pg._conn.info.backend_pid


def _terminate(pid: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    connection.close()


@pytest.mark.parametrize("durable", [True, False])
def test_synchronous_commit_of_the_writer_follows_the_setting(
    settings, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL setting (SQLite writes from a thread)")
    settings.EZAT_USAGE_SYNCHRONOUS_COMMIT = durable
    org = make_org()
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)

    async def record_and_ask() -> str:
        await recorder.record_usage(usage(org.pk, f"sc-{durable}"))
        assert writer._pg is not None and writer._pg._conn is not None
        cursor = await writer._pg._conn.execute("SHOW synchronous_commit")
        row = await cursor.fetchone()
        return str(row[0])

    try:
        assert asyncio.run(record_and_ask()) == ("on" if durable else "off")
    finally:
        writer.close()
    assert UsageRecord.objects.filter(org=org).count() == 1
