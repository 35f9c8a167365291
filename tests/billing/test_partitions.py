"""Issue 18: usage records and the request log partitioned by month on PostgreSQL.

The migration converts tables that hold rows (and keeps every one), rows go to their month's
partition (or the default one), the beat task creates months ahead idempotently through a real
Celery worker, retention drops only old request-log partitions, and replays stay idempotent.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing import partitions, recorder
from billing.models import RequestLog, UsageRecord
from billing.request_log import db_row, insert_rows, purge_expired
from billing.tasks import purge_request_log
from tests.billing import harness
from tests.billing.factories import make_org
from tests.billing.partition_helpers import (
    dsn_url,
    home_of,
    insert_log,
    insert_usage,
    migrate_to,
    partition_names,
    require_postgres,
    scratch_database,
)
from tests.billing.test_recorder import usage

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("restore_partitions"),
]  # DDL and a worker need committed rows

USAGE = partitions.USAGE_TABLE
LOG = partitions.REQUEST_LOG_TABLE


def _month_name(table: str, when: Any) -> str:
    return partitions.partition_name(table, partitions.month_floor(when))


def _rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()


def test_migration_converts_tables_with_rows_and_keeps_them() -> None:
    require_postgres()
    now = timezone.now()
    stamps = [now - timedelta(days=40 * n) for n in range(4)] + [now + timedelta(days=400)]
    with scratch_database() as (name, dsn):
        url = dsn_url(name)
        done = harness.subprocess_env(DATABASE_URL=url)
        migrate = migrate_to(done, "billing", "0006")
        assert migrate.returncode == 0, migrate.stderr
        with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cursor:
            cursor.execute(
                "INSERT INTO accounts_organization (name, balance_nano, created_at) "
                "VALUES ('m', 0, now()) RETURNING id"
            )
            (org_id,) = cursor.fetchone()
            for n, at in enumerate(stamps):
                insert_usage(cursor, org_id, f"old-{n}", at, cost=n + 1)
                insert_log(cursor, org_id, f"old-{n}", at, cost=n + 1)
        before = {t: _rows(dsn, t) for t in (USAGE, LOG)}
        migrate = migrate_to(done)
        assert migrate.returncode == 0, migrate.stderr
        with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cursor:
            for table in (USAGE, LOG):
                assert _rows(dsn, table) == before[table]  # every row, every value, same ids
                cursor.execute(
                    f"SELECT request_id, tableoid::regclass::text FROM {table} ORDER BY id"
                )
                homes = dict(cursor.fetchall())
                for n, at in enumerate(stamps[:4]):
                    assert homes[f"old-{n}"] == _month_name(table, at)
                assert homes["old-4"] == partitions.default_name(table)  # beyond the months made
            cursor.execute("SELECT count(*) FROM billing_usagerecord_request_key")
            assert cursor.fetchone() == (5,)
            # The sequence continues after the copied ids; an old request id is still taken.
            insert_usage(cursor, org_id, "new-0", now)
            cursor.execute("SELECT id FROM billing_usagerecord WHERE request_id = 'new-0'")
            assert cursor.fetchone()[0] > max(row[0] for row in before[USAGE])
            with pytest.raises(psycopg.errors.UniqueViolation):
                insert_usage(cursor, org_id, "old-3", now)
            insert_log(cursor, org_id, "old-1", stamps[1])  # the same row again: nothing
            cursor.execute("SELECT count(*) FROM billing_requestlog WHERE request_id = 'old-1'")
            assert cursor.fetchone() == (1,)


def test_inserts_go_to_their_month_and_a_late_partition_adopts_default_rows() -> None:
    require_postgres()
    org = make_org()
    now = timezone.now()
    far = now + timedelta(days=31 * 14)  # beyond any month created ahead
    with connection.cursor() as cursor:
        insert_usage(cursor, org.pk, "this-month", now)
        insert_usage(cursor, org.pk, "far-future", far)
        insert_log(cursor, org.pk, "far-future", far)
    assert home_of(USAGE, "this-month") == [_month_name(USAGE, now)]
    assert home_of(USAGE, "far-future") == [partitions.default_name(USAGE)]
    assert home_of(LOG, "far-future") == [partitions.default_name(LOG)]

    created = partitions.ensure_partitions(months_ahead=15)
    assert _month_name(USAGE, far) in created and _month_name(LOG, far) in created
    assert home_of(USAGE, "far-future") == [_month_name(USAGE, far)]  # moved out of the default
    assert home_of(LOG, "far-future") == [_month_name(LOG, far)]
    # Its request id stayed claimed through the move: a second record with it is refused.
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        insert_usage(cursor, org.pk, "far-future", now)
    assert partitions.ensure_partitions(months_ahead=15) == []


def test_beat_task_creates_months_ahead_idempotently_on_a_real_worker(workers) -> None:
    require_postgres()
    now = timezone.now()
    wanted = [
        partitions.partition_name(table, partitions.add_months(partitions.month_floor(now), n))
        for table in (USAGE, LOG)
        for n in range(20)
    ]
    worker = workers.start()
    task = "billing.tasks.ensure_partitions"
    done = rf"Task {task}\[[^\]]+\] succeeded in [^:]+: (.*)"
    workers.client.send_task(task, kwargs={"months_ahead": 19}, queue=workers.queue)
    worker.wait_for(done, count=1, timeout=120)
    assert set(wanted) <= set(partition_names(USAGE)) | set(partition_names(LOG))
    after_first = partition_names(USAGE) + partition_names(LOG)

    workers.client.send_task(task, kwargs={"months_ahead": 19}, queue=workers.queue)
    second = worker.wait_for(done, count=2, timeout=120)[1]
    assert second.group(1) == "[]"  # it found every partition there and created none
    assert partition_names(USAGE) + partition_names(LOG) == after_first
    assert "Traceback" not in worker.log()


def test_retention_drops_only_old_request_log_partitions(settings) -> None:
    require_postgres()
    settings.EZAT_REQUEST_LOG_RETENTION_DAYS = 30
    org = make_org()
    now = timezone.now()
    old = now - timedelta(days=100)  # its whole month is past the retention
    edge = now - timedelta(days=45)  # past the retention, but its month may not be over
    partitions.ensure_partitions(since=old)
    with connection.cursor() as cursor:
        for name, at in (("old", old), ("edge", edge), ("new", now)):
            insert_usage(cursor, org.pk, name, at)
            insert_log(cursor, org.pk, name, at)
    old_log, old_usage = _month_name(LOG, old), _month_name(USAGE, old)
    assert home_of(LOG, "old") == [old_log]

    purge_request_log.apply().get()  # beat's task, run in-process

    logs = partition_names(LOG)
    assert old_log not in logs and RequestLog.objects.filter(request_id="old").count() == 0
    assert _month_name(LOG, now) in logs and home_of(LOG, "new") == [_month_name(LOG, now)]
    cutoff = now - timedelta(days=30)
    edge_month_end = partitions.add_months(partitions.month_floor(edge), 1)
    assert (_month_name(LOG, edge) in logs) == (edge_month_end > cutoff)
    # Usage: every partition and every record stays.
    assert old_usage in partition_names(USAGE)
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == [
        "edge",
        "new",
        "old",
    ]
    assert purge_expired() == 0 and partition_names(LOG) == logs  # idempotent


def test_retention_deletes_stray_old_rows_of_the_default_partition(settings) -> None:
    require_postgres()
    settings.EZAT_REQUEST_LOG_RETENTION_DAYS = 30
    org = make_org()
    before = timezone.now() - timedelta(days=31 * 30)  # a month no partition was made for
    with connection.cursor() as cursor:
        insert_log(cursor, org.pk, "stray", before)
        insert_log(cursor, org.pk, "kept", timezone.now())
    assert home_of(LOG, "stray") == [partitions.default_name(LOG)]
    assert purge_expired() == 1
    assert list(RequestLog.objects.values_list("request_id", flat=True)) == ["kept"]


def _write(fields_list: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)

    async def scenario() -> None:
        for fields in fields_list:
            await writer.write(dict(fields))

    try:
        asyncio.run(scenario())
    finally:
        writer.close()


def test_a_replay_written_in_another_month_is_not_billed_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spool replay is written later, with a later `created_at`: even when the first write
    landed in last month's partition, the replay collides and stores nothing."""
    require_postgres()
    org = make_org()
    data = usage(org.pk, "replayed")
    fields = recorder._fields(data, data.cost_nano)
    _write([fields], monkeypatch)
    last_month = timezone.now() - timedelta(days=35)
    partitions.ensure_partitions(since=last_month)
    UsageRecord.objects.filter(request_id="replayed").update(created_at=last_month)
    assert home_of(USAGE, "replayed") == [_month_name(USAGE, last_month)]

    _write([fields], monkeypatch)  # the replay, through the hot path's writer
    assert UsageRecord.objects.filter(org=org).count() == 1

    # A caller reusing the id for another request (another start) is billed, suffixed.
    other = usage(org.pk, "replayed")
    _write([recorder._fields(other, other.cost_nano)], monkeypatch)
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids[0] == "replayed" and ids[1].startswith("replayed~") and len(ids) == 2


def test_request_log_replay_collides_on_the_partitioned_key() -> None:
    require_postgres()
    org = make_org()
    start = timezone.now()
    row: dict[str, Any] = {
        "request_id": "log-replay", "org_id": org.pk, "api_key_id": None, "api": "chat",
        "stream": False, "model_name": "m", "model_id": "m", "requested_model": "m",
        "deployment": "d", "status": "ok", "http_status": 200, "error_type": "",
        "error_message": "", "finish_reason": "stop", "input_tokens": 1, "output_tokens": 1,
        "cache_read_tokens": 0, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
        "reasoning_tokens": 0, "cost_nano": 5, "output_exact": True, "hold_nano": 0,
        "attempts": [], "admitted_ms": 1, "ttft_ms": 1, "latency_ms": 2, "count": 1,
        "started_at": start, "created_at": start + timedelta(seconds=2),
    }  # fmt: skip
    insert_rows([db_row(row)])
    insert_rows([db_row(row), db_row(row)])  # a retried batch: the same values again
    assert RequestLog.objects.filter(request_id="log-replay").count() == 1
    insert_rows([db_row({**row, "started_at": start + timedelta(seconds=1)})])  # reused id
    assert RequestLog.objects.filter(request_id="log-replay").count() == 2
