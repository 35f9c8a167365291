"""The durable usage spool: fsync batching, torn lines after a crash, idempotent replay, and the
writer handing a batch the database refused to the spool (the answer still goes out)."""

from __future__ import annotations

import asyncio
import fcntl
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from billing import recorder, spool
from billing.models import UsageRecord
from tests.billing.factories import PRICES, make_org

pytestmark = pytest.mark.django_db(transaction=True)  # replay runs the ORM; writer on a thread


def fields(org_id: int, request_id: str, **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request_id": request_id,
        "org_id": org_id,
        "api_key_id": None,
        "api": "messages",
        "stream": True,
        "model_id": "anthropic/claude-sonnet-5-5",
        "model_name": "sonnet",
        "requested_model": "anthropic/claude-sonnet-5-5",
        "deployment": "d",
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_read_tokens": 0,
        "cache_write_5m_tokens": 0,
        "cache_write_1h_tokens": 0,
        "reasoning_tokens": 0,
        "cost_nano": 450_000,
        "prices": PRICES,
        "price_version": None,
        "output_exact": True,
        "status": "ok",
        "attempts": [{"outcome": "ok"}],
        "latency_ms": 12,
        "ttft_ms": 3,
        "started_at": timezone.now(),
    }
    record.update(overrides)
    return record


def write_spool(directory: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{spool.PREFIX}test-{len(list(directory.iterdir()))}{spool.SUFFIX}"
    path.write_bytes(b"".join(spool.encode(r) for r in records) + tail)
    return path


def test_encode_decode_round_trip_keeps_the_start_time_exactly() -> None:
    record = fields(1, "req-a")
    decoded = spool.decode(spool.encode(record))
    assert decoded == record  # started_at to the microsecond: the replay's identity


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"0000000",  # cut inside the checksum
        b'deadbeef {"request_id": "x"}\n',  # wrong checksum
        spool.encode({"request_id": "x", "started_at": "2026-01-01T00:00:00+00:00"})[:-5],
    ],
)
def test_torn_or_corrupt_lines_decode_to_none(line: bytes) -> None:
    assert spool.decode(line) is None


def test_torn_last_line_after_a_crash_is_skipped_with_a_metric(tmp_path: Path) -> None:
    org = make_org()
    good = [fields(org.pk, f"req-torn-{i}") for i in range(3)]
    torn = spool.encode(fields(org.pk, "req-torn-cut"))[:-17]  # the crash hit mid-write
    path = write_spool(tmp_path, good, tail=torn)
    before = spool.TORN_LINES._value.get()

    result = spool.replay(tmp_path)

    assert (result.replayed, result.torn, result.files) == (3, 1, 1)
    assert spool.TORN_LINES._value.get() - before == 1
    assert sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True)) == [
        "req-torn-0",
        "req-torn-1",
        "req-torn-2",
    ]
    assert not path.exists()  # replayed files are deleted


def test_replay_is_idempotent_and_keeps_a_reused_request_id_as_a_suffixed_record(
    tmp_path: Path,
) -> None:
    org = make_org()
    t0 = timezone.now()
    # Recorded on the hot path, then (its answer lost) spooled too: must not be billed twice.
    recorded = fields(org.pk, "req-dup", started_at=t0)
    recorder.insert_idempotent(dict(recorded))
    # A caller that reused its own x-request-id for a second, real request: billed as well.
    reused = fields(org.pk, "req-dup", started_at=t0 + timedelta(milliseconds=7), output_tokens=3)
    fresh = fields(org.pk, "req-fresh", started_at=t0)
    batch = [recorded, reused, fresh]

    for _ in range(3):  # the same spool replayed three times (crash after the inserts, twice)
        write_spool(tmp_path, batch)
        spool.replay(tmp_path)

    rows = list(UsageRecord.objects.filter(org=org).order_by("started_at", "request_id"))
    ids = [r.request_id for r in rows]
    assert len(rows) == 3, ids  # double-billed: 0
    assert ids[0] == "req-dup" and ids[1] == "req-fresh"
    assert ids[2].startswith("req-dup~") and rows[2].output_tokens == 3


def test_a_file_held_by_a_live_writer_is_left_alone(tmp_path: Path) -> None:
    org = make_org()
    path = write_spool(tmp_path, [fields(org.pk, "req-live")])
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what the writing process holds while it lives
        result = spool.replay(tmp_path)
        assert (result.busy, result.replayed) == (1, 0)
        assert path.exists() and not UsageRecord.objects.filter(org=org).exists()
    finally:
        os.close(fd)  # the writer died: the lock is gone
    assert spool.replay(tmp_path).replayed == 1
    assert UsageRecord.objects.filter(org=org).count() == 1


def test_replay_keeps_the_file_while_the_database_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = make_org()
    path = write_spool(tmp_path, [fields(org.pk, "req-down")])

    def down(_: dict[str, Any]) -> bool:
        raise OperationalError("connection refused")

    monkeypatch.setattr(recorder, "insert_idempotent", down)
    with pytest.raises(OperationalError):
        spool.replay(tmp_path)
    assert path.exists()
    monkeypatch.undo()
    assert spool.replay(tmp_path).replayed == 1 and not path.exists()


def test_appends_are_fsynced_in_batches_and_durable_on_return(tmp_path: Path) -> None:
    writer = spool.UsageSpool(tmp_path)

    async def scenario() -> None:
        await asyncio.gather(*(writer.append([fields(1, f"req-b-{i}")]) for i in range(200)))

    asyncio.run(scenario())
    path = writer.close()
    assert path is not None
    records, torn = spool.read_records(path)
    assert (len(records), torn, writer.appended) == (200, 0, 200)
    # Group fsync: records arriving while one fsync runs share the next one.
    assert 1 <= writer.fsyncs < 200


def test_the_writer_spools_a_batch_the_database_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = make_org()
    local = spool.UsageSpool(tmp_path)
    monkeypatch.setattr(spool, "spool", local)
    writer = recorder.UsageWriter()

    async def broken(batch: list[dict[str, Any]]) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(writer, "_write_batch", broken)

    async def scenario() -> None:
        # Every request's record "succeeds": the spool has it, so the answer goes out.
        await asyncio.gather(*(writer.write(fields(org.pk, f"req-w-{i}")) for i in range(20)))

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    path = local.close()
    assert path is not None and not UsageRecord.objects.filter(org=org).exists()
    result = spool.replay(tmp_path)  # the database is back: the retry loop's replay
    assert result.replayed == 20
    assert UsageRecord.objects.filter(org=org).count() == 20  # lost records: 0


# --- the spool itself cannot write (disk full, unwritable) ------------------------------------------
def test_records_neither_store_takes_are_held_in_memory_and_new_work_is_refused_until_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = make_org()
    blocked = tmp_path / "blocked"
    blocked.write_bytes(b"a file where the spool's parent directory should be")
    local = spool.UsageSpool(blocked / "spool")  # mkdir fails: NotADirectoryError
    monkeypatch.setattr(spool, "spool", local)
    writer = recorder.UsageWriter()

    async def broken(batch: list[dict[str, Any]]) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(writer, "_write_batch", broken)
    held_before = recorder.HELD_TOTAL._value.get()

    async def scenario() -> None:
        assert writer.accepting()
        # Every request's record "succeeds" (no 500 after the upstream did the work): held.
        await asyncio.gather(*(writer.write(fields(org.pk, f"req-h-{i}")) for i in range(5)))
        assert (writer.held, writer.accepting()) == (5, False)
        assert recorder.HELD_RECORDS._value.get() == 5
        assert recorder.HELD_TOTAL._value.get() - held_before == 5
        # Both stores still down: nothing placed, nothing lost.
        assert await writer.retry_held() == 0
        assert writer.held == 5
        # The disk is back (the database is not): the spool takes them, new work is admitted.
        blocked.unlink()
        assert await writer.retry_held() == 5
        assert (writer.held, writer.accepting()) == (0, True)

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    path = local.close()
    assert path is not None and not UsageRecord.objects.filter(org=org).exists()
    assert spool.replay(blocked / "spool").replayed == 5
    assert UsageRecord.objects.filter(org=org).count() == 5  # lost records: 0


def test_held_records_go_straight_to_the_database_once_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = make_org()
    blocked = tmp_path / "blocked"
    blocked.write_bytes(b"x")
    monkeypatch.setattr(spool, "spool", spool.UsageSpool(blocked / "spool"))
    writer = recorder.UsageWriter()
    real = writer._write_batch

    async def broken(batch: list[dict[str, Any]]) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    async def scenario() -> None:
        monkeypatch.setattr(writer, "_write_batch", broken)
        await writer.write(fields(org.pk, "req-db-back"))
        assert writer.held == 1
        monkeypatch.setattr(writer, "_write_batch", real)
        assert await writer.retry_held() == 1
        assert await writer.retry_held() == 0  # placed once: nothing left to place twice

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    assert list(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True)) == [
        "req-db-back"
    ]


def test_a_failed_spool_write_starts_a_new_file_so_a_torn_tail_never_swallows_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = make_org()
    local = spool.UsageSpool(tmp_path)
    real_write = os.write
    failures = [1]

    def disk_full_once(fd: int, data: Any) -> int:
        if failures:
            failures.pop()
            real_write(fd, bytes(data)[: len(data) // 2])  # half a line, then ENOSPC
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(spool.os, "write", disk_full_once)

    async def scenario() -> None:
        with pytest.raises(spool.SpoolError):
            await local.append([fields(org.pk, "req-torn")])
        await local.append([fields(org.pk, "req-after")])

    asyncio.run(scenario())
    local.close()
    monkeypatch.undo()
    assert len(list(tmp_path.glob(f"{spool.PREFIX}*{spool.SUFFIX}"))) == 2
    result = spool.replay(tmp_path)
    assert (result.replayed, result.torn) == (1, 1)
    # The record written after the torn line is whole (it would have been read as part of the
    # torn line, and lost, had it been appended to the same file).
    assert list(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True)) == [
        "req-after"
    ]


def test_a_failed_streams_record_and_the_sweep_of_its_checkpoint_bill_it_once() -> None:
    org = make_org()
    started = timezone.now()
    # The failure path recorded the partial stream...
    partial = fields(
        org.pk, "req-failed", status="stream_failed", output_exact=False, started_at=started
    )
    assert recorder.insert_idempotent(dict(partial)) is True
    # ...and the process died before a checkpoint write dropped it: the sweeper's estimate of
    # the same request (same id, org and start) is a no-op.
    swept = fields(org.pk, "req-failed", output_exact=False, output_tokens=7, started_at=started)
    assert recorder.insert_idempotent(swept) is False
    [record] = UsageRecord.objects.filter(org=org)
    assert (record.request_id, record.status) == ("req-failed", "stream_failed")
