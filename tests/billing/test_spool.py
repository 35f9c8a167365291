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
