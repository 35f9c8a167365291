"""Issue 16: request-log rows are written exactly once. The writer's batch INSERT is idempotent
(ON CONFLICT DO NOTHING on the `reqlog_request_once` constraint), so a batch replayed after a
lost connection or a lost commit answer writes nothing twice, and the database itself refuses a
second row of one request."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing import recorder
from billing.models import RequestLog
from tests.billing.factories import make_org

pytestmark = pytest.mark.django_db(transaction=True)  # rows are written by the writer's connection


def log_fields(org_id: int, request_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    """A request-log row as gateway/outcome.py hands it to the writer."""
    now = timezone.now()
    fields: dict[str, Any] = {
        "request_id": request_id or f"req_{uuid.uuid4().hex}",
        "org_id": org_id,
        "api_key_id": None,
        "api": "messages",
        "stream": False,
        "model_name": "sonnet",
        "model_id": "anthropic/claude-sonnet-5-5",
        "requested_model": "anthropic/claude-sonnet-5-5",
        "deployment": "",
        "status": "error",
        "http_status": 429,
        "error_type": "rate_limit_error",
        "error_message": "requests per minute limit of this key exceeded",
        "finish_reason": "",
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_5m_tokens": 0,
        "cache_write_1h_tokens": 0,
        "reasoning_tokens": 0,
        "cost_nano": 0,
        "output_exact": True,
        "hold_nano": 0,
        "attempts": [],
        "admitted_ms": None,
        "ttft_ms": None,
        "latency_ms": 3,
        "count": 1,
        "started_at": now - timedelta(milliseconds=3),
        "created_at": now,
    }
    fields.update(overrides)
    return fields


def _stored(org_id: int) -> list[tuple[str, int]]:
    return sorted(RequestLog.objects.filter(org_id=org_id).values_list("request_id", "count"))


def _writer_pid(writer: recorder.UsageWriter) -> int | None:
    if writer._pg is None or writer._pg._conn is None:
        return None
    return writer._pg._conn.info.backend_pid


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    connection.close()


def test_a_replayed_batch_writes_nothing_twice() -> None:
    """The whole batch again (the first commit's answer was lost), then a batch whose first half
    was committed before the connection died: every request once, collapsed counts kept."""
    org = make_org()
    first = [log_fields(org.pk, f"a-{i}") for i in range(5)]
    first[0]["count"] = 7  # a collapsed refusal row: the first refusal's id and start
    more = [log_fields(org.pk, f"b-{i}") for i in range(4)]
    writer = recorder.UsageWriter()

    async def scenario() -> None:
        await writer._write_log_batch(first)
        await writer._write_log_batch(first)  # replayed whole
        await writer._write_log_batch(more[:2])
        pid = _writer_pid(writer)
        if pid is not None:  # PostgreSQL: the writer's own connection is lost between batches
            await asyncio.to_thread(_terminate, pid)
        await writer._write_log_batch(first + more)  # the retry carries the committed half too

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    expected = sorted([(f"a-{i}", 7 if i == 0 else 1) for i in range(5)])
    expected += sorted((f"b-{i}", 1) for i in range(4))
    assert _stored(org.pk) == sorted(expected)


def test_the_database_refuses_a_second_row_of_one_request() -> None:
    """The constraint, not only the writer's SQL: nothing else can write a request twice."""
    org = make_org()
    fields = log_fields(org.pk, "once")
    fields["org_id"] = org.pk
    RequestLog.objects.create(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        RequestLog.objects.create(**{**fields, "count": 2})
    assert _stored(org.pk) == [("once", 1)]


def test_a_reused_caller_request_id_is_a_second_row_not_a_duplicate() -> None:
    """A caller may send the same x-request-id with two requests: both ran, both are logged
    (their start times differ), as usage records keep both too."""
    org = make_org()
    one = log_fields(org.pk, "mine")
    two = log_fields(org.pk, "mine", started_at=one["started_at"] + timedelta(seconds=1))
    writer = recorder.UsageWriter()
    try:
        asyncio.run(writer._write_log_batch([one]))
        asyncio.run(writer._write_log_batch([two, one]))
    finally:
        writer.close()
    assert _stored(org.pk) == [("mine", 1), ("mine", 1)]


def test_rows_wait_for_a_shared_insert_then_land_without_a_drain(settings) -> None:  # type: ignore[no-untyped-def]
    """Rows queued one by one (a request at a time) share one INSERT after the flush delay
    instead of costing one each, and are written by the writer's own timer."""
    settings.EZAT_REQUEST_LOG_FLUSH_SECONDS = 0.3
    org = make_org()
    writer = recorder.UsageWriter()
    batches: list[int] = []
    original = writer._write_log_batch

    async def counting(batch: list[dict[str, Any]]) -> None:
        batches.append(len(batch))
        await original(batch)

    writer._write_log_batch = counting  # type: ignore[method-assign]

    async def scenario() -> None:
        for i in range(5):
            assert writer.submit_log(log_fields(org.pk, f"one-by-one-{i}"))
            await asyncio.sleep(0.01)
        assert batches == []  # nothing written before the delay
        async with asyncio.timeout(30):
            while not batches:
                await asyncio.sleep(0.02)
            while writer._flusher is not None and not writer._flusher.done():
                await asyncio.sleep(0.02)

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    assert batches == [5]
    assert len(_stored(org.pk)) == 5
