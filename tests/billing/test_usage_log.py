"""Group-committed usage (EZAT_USAGE_COMMIT=group, billing/usage_log.py): the row is fsync'd in a
local log shared by concurrent requests before the answer ends, and a flusher stores it in the
database (idempotently) and then settles its request in the limiter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError

from billing import spool, usage_log
from billing.models import UsageRecord
from billing.spool_owner import current_identity
from tests.billing.factories import make_org
from tests.billing.test_recorder import usage
from tests.billing.test_spool import fields
from tests.waiting import async_wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the flusher writes from its own thread

COST = 937_500  # of tests.billing.test_recorder.usage


class Settled:
    """Stands in for the limiter's settle (gateway/durability.settle_logged)."""

    def __init__(self) -> None:
        self.settles: list[dict[str, Any]] = []

    async def __call__(self, settles: list[dict[str, Any]]) -> None:
        self.settles.extend(settles)


class Outage:
    """The database as the flusher sees it: down until `up` is set."""

    def __init__(self, log: usage_log.UsageLog) -> None:
        self.down = True
        self.attempts = 0
        self._real = log._store.store_batch
        log._store.store_batch = self._store  # type: ignore[method-assign]

    async def _store(
        self, records: list[dict[str, Any]], log_rows: list[dict[str, Any]] | None = None
    ) -> None:
        self.attempts += 1
        if self.down:
            raise OperationalError("connection refused")
        await self._real(records, log_rows)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Settled]:
    fake = Settled()
    previous = usage_log._settler
    usage_log.set_settler(fake)
    yield fake
    usage_log.set_settler(previous)


@pytest.fixture
def log(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    settings.EZAT_USAGE_COMMIT = "group"
    made = usage_log.UsageLog(tmp_path / "log")
    monkeypatch.setattr(usage_log, "usage_log", made)
    yield made
    made.close()


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{spool.LOG_PREFIX}*{spool.SUFFIX}"))


def test_concurrent_requests_share_fsyncs_and_every_row_lands_once(
    log: usage_log.UsageLog, settled: Settled
) -> None:
    org = make_org()

    async def scenario() -> list[tuple[int, bool]]:
        results = await asyncio.gather(
            *(usage_log.record(usage(org.pk, f"gc-{i}"), f"lim-{i}") for i in range(100))
        )
        await log.wait_flushed()
        return results

    results = asyncio.run(scenario())
    assert results == [(COST, True)] * 100  # logged, unflushed when answered
    assert log.file.appended == 100
    # One fsync covered every record queued while the previous one ran.
    assert 1 <= log.fsyncs < 100
    ids = list(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert sorted(ids) == sorted(f"gc-{i}" for i in range(100))
    assert sorted(s["limits_id"] for s in settled.settles) == sorted(f"lim-{i}" for i in range(100))
    assert {(s["org_id"], s["cost_nano"]) for s in settled.settles} == {(org.pk, COST)}
    assert sum(log.batch_sizes) == 100 and len(log.batch_sizes) < 100  # batched INSERTs


def test_direct_mode_does_not_touch_the_log(
    log: usage_log.UsageLog, settled: Settled, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from billing import recorder

    settings.EZAT_USAGE_COMMIT = "direct"
    org = make_org()
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)
    try:
        assert asyncio.run(usage_log.record(usage(org.pk, "direct-1"), "lim")) == (COST, False)
    finally:
        writer.close()
    assert log.file.appended == 0 and UsageRecord.objects.filter(org=org).count() == 1


def test_a_database_outage_keeps_answering_and_the_rows_land_once_it_is_back(
    log: usage_log.UsageLog, settled: Settled
) -> None:
    org = make_org()
    outage = Outage(log)

    async def scenario() -> None:
        for i in range(5):  # each answered while the database is down
            assert await usage_log.record(usage(org.pk, f"out-{i}"), f"lim-out-{i}") == (COST, True)

        async def retried() -> bool:
            return outage.attempts >= 2

        await async_wait_for(retried, 30, what="the flusher retrying")
        assert log.unflushed == 5 and not settled.settles  # nothing settled before it is stored
        exists = await asyncio.to_thread(_count, org.pk)
        assert exists == 0
        outage.down = False
        await log.wait_flushed()

    asyncio.run(scenario())
    assert UsageRecord.objects.filter(org=org).count() == 5
    assert len(settled.settles) == 5
    assert segment_files(log.file.directory)  # the current segment (not full, not old)


def _count(org_id: int) -> int:
    from django.db import connections

    try:
        return UsageRecord.objects.filter(org_id=org_id).count()
    finally:
        connections.close_all()


def test_a_crash_before_the_flush_loses_nothing_and_the_replay_stores_each_row_once(
    log: usage_log.UsageLog, settled: Settled
) -> None:
    org = make_org()
    outage = Outage(log)
    outage.down = False

    async def scenario() -> None:
        for i in range(3):
            await usage_log.record(usage(org.pk, f"crash-{i}"), f"lim-crash-{i}")
        await log.wait_flushed()  # stored, still in the segment
        outage.down = True
        for i in range(3, 5):
            await usage_log.record(usage(org.pk, f"crash-{i}"), f"lim-crash-{i}")

    asyncio.run(scenario())
    directory = log.file.directory
    (segment,) = segment_files(directory)
    log.close()  # the process dies: its lock goes, the unflushed records only in the file
    assert UsageRecord.objects.filter(org=org).count() == 3

    result = spool.replay(directory)  # the next start's durability round
    assert (result.replayed, result.torn, result.files) == (5, 0, 1)
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids == [f"crash-{i}" for i in range(5)]  # the three already stored: not twice
    assert sorted(s["limits_id"] for s in result.settles) == [f"lim-crash-{i}" for i in range(5)]
    assert not segment.exists()
    assert spool.replay(directory).replayed == 0


def test_a_live_processs_segment_is_not_replayed(log: usage_log.UsageLog, settled: Settled) -> None:
    org = make_org()
    Outage(log)

    async def scenario() -> None:
        await usage_log.record(usage(org.pk, "live-1"), "lim-live-1")

    asyncio.run(scenario())
    result = spool.replay(log.file.directory)
    assert (result.busy, result.replayed) == (1, 0)  # its writer holds the lock


def test_a_torn_tail_is_ignored_and_the_complete_records_replayed(tmp_path: Path) -> None:
    org = make_org()
    records = [
        {**fields(org.pk, f"torn-{i}"), spool.SETTLE_FIELD: {"limits_id": f"l{i}"}}
        for i in range(3)
    ]
    torn = spool.encode({**fields(org.pk, "torn-cut"), spool.SETTLE_FIELD: {}})[:-11]
    path = tmp_path / f"{spool.LOG_PREFIX}dead-1-abc{spool.SUFFIX}"
    path.write_bytes(b"".join(spool.encode(r) for r in records) + torn)

    result = spool.replay(tmp_path)

    assert (result.replayed, result.torn) == (3, 1)
    assert [s["limits_id"] for s in result.settles] == ["l0", "l1", "l2"]
    assert sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True)) == [
        "torn-0",
        "torn-1",
        "torn-2",
    ]


def test_flushed_segments_are_closed_and_deleted(
    log: usage_log.UsageLog, settled: Settled, settings: Any
) -> None:
    settings.EZAT_USAGE_LOG_SEGMENT_RECORDS = 4
    org = make_org()

    async def scenario() -> None:
        for i in range(10):
            await usage_log.record(usage(org.pk, f"seg-{i}"), f"lim-seg-{i}")
            await log.wait_flushed()

    asyncio.run(scenario())
    assert UsageRecord.objects.filter(org=org).count() == 10
    files = segment_files(log.file.directory)
    assert len(files) == 1  # only the current one; the two full ones are gone
    assert len(spool.read_records(files[0])[0]) == 2


def test_the_log_lives_in_its_databases_folder_and_another_databases_log_is_left(
    tmp_path: Path, settings: Any, settled: Settled
) -> None:
    settings.EZAT_USAGE_SPOOL_DIR = str(tmp_path)
    settings.EZAT_USAGE_COMMIT = "group"
    org = make_org()
    mine = usage_log.UsageLog()

    async def scenario() -> None:
        await mine.commit(fields(org.pk, "mine-1"), {"limits_id": "m"})
        await mine.wait_flushed()

    try:
        asyncio.run(scenario())
        assert mine.file.current is not None
        assert mine.file.current.parent == tmp_path / current_identity().folder
    finally:
        mine.close()
    other = tmp_path / "db-0123456789abcdef"
    other.mkdir()
    theirs = other / f"{spool.LOG_PREFIX}elsewhere-1-x{spool.SUFFIX}"
    theirs.write_bytes(spool.encode({**fields(org.pk, "theirs-1"), spool.SETTLE_FIELD: {}}))

    result = spool.replay()

    assert result.foreign == 1 and theirs.exists()
    assert not UsageRecord.objects.filter(request_id="theirs-1").exists()
    assert UsageRecord.objects.filter(request_id="mine-1").count() == 1
