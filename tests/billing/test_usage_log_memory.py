"""The group-commit log's memory is bounded during a database outage (EZAT_USAGE_LOG_MEMORY_RECORDS,
billing/usage_log.py): records past the bound are only on disk, read back from their segments
once the database returns, and every row lands exactly once; a crash while records are spilled
loses none of them either (the replay reads the segments)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from billing import spool, usage_log
from billing.models import UsageRecord
from tests.billing.factories import make_org
from tests.billing.test_recorder import usage
from tests.billing.test_usage_log import Outage, Settled, log, segment_files, settled  # noqa: F401
from tests.waiting import async_wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the flusher writes from its own thread

LIMIT = 3


@pytest.fixture(autouse=True)
def small_memory(settings: Any) -> None:
    settings.EZAT_USAGE_LOG_MEMORY_RECORDS = LIMIT
    settings.EZAT_USAGE_LOG_SEGMENT_RECORDS = 4  # spilled records span segments on the way back


def test_an_outage_keeps_at_most_the_bound_in_memory_and_every_row_lands_once(
    log: usage_log.UsageLog,  # noqa: F811
    settled: Settled,  # noqa: F811
) -> None:
    org = make_org()
    outage = Outage(log)
    spilled_before = usage_log.SPILLED._value.get()

    async def scenario() -> None:
        for i in range(10):  # answered while the database is down
            await usage_log.record(usage(org.pk, f"mem-{i}"), f"lim-mem-{i}")
            assert log.in_memory <= LIMIT

        async def retried() -> bool:
            return outage.attempts >= 2

        await async_wait_for(retried, 30, what="the flusher retrying")
        assert (log.in_memory, log.unflushed) == (LIMIT, 10)
        assert usage_log.SPILLED._value.get() - spilled_before == 10 - LIMIT
        outage.down = False
        # More requests while the spilled records are read back: they spill too (in order)
        # until the queue has caught up, and land once like the others.
        for i in range(10, 16):
            await usage_log.record(usage(org.pk, f"mem-{i}"), f"lim-mem-{i}")
            assert log.in_memory <= LIMIT
        await log.wait_flushed()

    asyncio.run(scenario())
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids == sorted(f"mem-{i}" for i in range(16))  # none lost, none twice
    assert sorted(s["limits_id"] for s in settled.settles) == sorted(
        f"lim-mem-{i}" for i in range(16)
    )
    assert log.unflushed == 0
    # Every full segment was deleted once stored: at most the current one is left (16 records
    # in segments of 4: none, if the last one was closed when it filled).
    files = segment_files(log.file.directory)
    assert len(files) <= 1
    assert all(len(spool.read_records(f)[0]) < 4 for f in files)


def test_a_crash_with_records_spilled_loses_none_of_them(
    log: usage_log.UsageLog,  # noqa: F811
    settled: Settled,  # noqa: F811
) -> None:
    org = make_org()
    Outage(log)

    async def scenario() -> None:
        for i in range(8):
            await usage_log.record(usage(org.pk, f"spill-{i}"), f"lim-spill-{i}")

    asyncio.run(scenario())
    assert (log.in_memory, log.unflushed) == (LIMIT, 8)
    directory = log.file.directory
    log.close()  # the process dies with records in memory and records on disk only

    result = spool.replay(directory)  # the next start's durability round
    assert result.replayed == 8
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids == sorted(f"spill-{i}" for i in range(8))
    assert not segment_files(directory)
