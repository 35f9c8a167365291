"""Issue 22: cheaper usage and request-log rows on PostgreSQL (billing/0008_drop_unused_indexes).

0008 drops five indexes no query needs. The request-id key table and its row triggers are
unchanged, and a duplicate request id is refused and handled exactly as before: in a batch
through the hot path's writer (a replay stores nothing, a reused caller id is stored suffixed,
the rest of the batch once), and across UPDATEs, DELETEs and partitions. The queries that
filtered on the dropped indexes' columns still read an index (the plans say which), and the
migration reverses.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing import partitions, recorder
from billing.models import RequestLog, UsageRecord
from tests.billing import harness
from tests.billing.factories import make_org
from tests.billing.partition_helpers import (
    dsn_url,
    home_of,
    insert_usage,
    migrate_to,
    require_postgres,
    scratch_database,
)
from tests.billing.test_recorder import usage

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("restore_partitions"),
]

KEYS = partitions.USAGE_KEY_TABLE
DROPPED = {
    "billing_usagerecord_org_id_038fdab7",
    "billing_usagerecord_model_id_c31432a7",
    "billing_usagerecord_model_id_c31432a7_like",
    "billing_usagerecord_request_id_key",
    "billing_requestlog_org_id_ce961611",
}


def _keys() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT request_id FROM {KEYS} ORDER BY request_id")
        return [row[0] for row in cursor.fetchall()]


def _triggers(cursor: Any) -> dict[str, bool]:
    """The usage table's own triggers: name → row-level."""
    cursor.execute(
        "SELECT tgname, (tgtype & 1) = 1 FROM pg_trigger "
        "WHERE tgrelid = %s::regclass AND NOT tgisinternal",
        [partitions.USAGE_TABLE],
    )
    return dict(cursor.fetchall())


def test_a_duplicate_request_id_in_one_batch_is_handled_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the hot path's writer (billing/pg_async.py): a replay of a stored record in a
    batch fails the batch on the key table, and the recorder's row-by-row path then stores the
    new record once, the replay not at all and a reused caller id suffixed."""
    require_postgres()
    org = make_org()
    stored = usage(org.pk, "dup-stored")
    stored_fields = recorder._fields(stored, stored.cost_nano)
    writer = recorder.UsageWriter()
    monkeypatch.setattr(recorder, "writer", writer)
    fresh = usage(org.pk, "dup-fresh")
    reused = usage(org.pk, "dup-stored")  # the caller's id again, another request

    async def scenario() -> None:
        await writer.write(dict(stored_fields))
        await asyncio.gather(
            writer.write(recorder._fields(fresh, fresh.cost_nano)),
            writer.write(dict(stored_fields)),  # the replay
            writer.write(recorder._fields(reused, reused.cost_nano)),
        )

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
    assert writer.batch_sizes[-1] == 3  # the three went as one batch
    ids = sorted(UsageRecord.objects.filter(org=org).values_list("request_id", flat=True))
    assert ids[:2] == ["dup-fresh", "dup-stored"] and len(ids) == 3
    assert ids[2].startswith("dup-stored~")
    assert _keys() == ids


def test_updates_and_deletes_move_and_free_the_keys() -> None:
    require_postgres()
    org = make_org()
    now = timezone.now()
    last_month = now - timedelta(days=35)
    partitions.ensure_partitions(since=last_month)
    with connection.cursor() as cursor:
        for rid in ("a", "b", "c"):
            insert_usage(cursor, org.pk, rid, now)
    records = UsageRecord.objects.filter(org=org)
    # A move to last month's partition (DELETE + INSERT underneath) keeps the id claimed.
    records.filter(request_id="a").update(created_at=last_month)
    assert home_of(partitions.USAGE_TABLE, "a") == [
        partitions.partition_name(partitions.USAGE_TABLE, partitions.month_floor(last_month))
    ]
    assert _keys() == ["a", "b", "c"]
    # Moved back and renamed in one statement: the old id is freed, the new one claimed.
    records.filter(request_id="a").update(created_at=now, request_id="a2")
    assert _keys() == ["a2", "b", "c"]
    for ids in (["c"], ["b", "c"]):  # onto a taken id; two rows onto one id
        with pytest.raises(IntegrityError), transaction.atomic():
            records.filter(request_id__in=ids).update(request_id="b" if ids == ["c"] else "x")
    assert _keys() == ["a2", "b", "c"]
    records.update(cost_nano=9)  # an UPDATE that changes no id (the reconciler's kind)
    assert _keys() == ["a2", "b", "c"]
    records.filter(request_id="a2").delete()
    assert _keys() == ["b", "c"]
    with connection.cursor() as cursor:
        insert_usage(cursor, org.pk, "a2", now)  # a freed id may be used again
        with pytest.raises(IntegrityError), transaction.atomic():
            insert_usage(cursor, org.pk, "b", now)
    assert _keys() == ["a2", "b", "c"]


def _index_of(sql: str, params: list[Any]) -> set[str]:
    """The indexes PostgreSQL reads for the query when it may not scan a table whole."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        assert node["Node Type"] != "Seq Scan", node
        if "Index Name" in node:
            found.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


def _sql(queryset: Any) -> tuple[str, list[Any]]:
    sql, params = queryset.query.sql_with_params()
    return sql, list(params)


def test_the_dropped_indexes_leave_every_such_query_an_index() -> None:
    """The org, request-id and model filters the selectors send, on the month's partitions."""
    require_postgres()
    org = make_org()
    month = partitions.partition_name(
        partitions.USAGE_TABLE, partitions.month_floor(timezone.now())
    )
    log_month = partitions.partition_name(
        partitions.REQUEST_LOG_TABLE, partitions.month_floor(timezone.now())
    )
    by_org = UsageRecord.objects.filter(org=org).order_by("-created_at")[:50]
    assert f"{month}_org_id_created_at_idx" in _index_of(*_sql(by_org))
    by_model = UsageRecord.objects.filter(org=org, model_id__iexact="m")
    assert f"{month}_org_id_created_at_idx" in _index_of(*_sql(by_model))
    like = f"{month}_request_id_idx"  # the varchar_pattern_ops one: `=`, IN and prefixes
    for queryset in (  # without the org (which its own index would serve): the id alone
        UsageRecord.objects.filter(request_id="r").order_by(),
        UsageRecord.objects.filter(request_id__in=["r", "s"]).order_by(),
        UsageRecord.objects.filter(request_id__startswith="r~").order_by(),
    ):
        assert like in _index_of(*_sql(queryset)), queryset.query
    logs = RequestLog.objects.filter(org=org).order_by("-created_at")[:50]
    assert f"{log_month}_org_id_created_at_idx" in _index_of(*_sql(logs))
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [like])
        assert "varchar_pattern_ops" in cursor.fetchone()[0]


def test_the_migration_reverses_and_applies_again() -> None:
    require_postgres()
    with scratch_database() as (name, dsn):
        env = harness.subprocess_env(DATABASE_URL=dsn_url(name))
        for target in ((), ("billing", "0007"), ()):
            done = migrate_to(env, *target)
            assert done.returncode == 0, done.stderr
            with psycopg.connect(dsn) as conn, conn.cursor() as cursor:
                triggers = _triggers(cursor)
                cursor.execute(
                    "SELECT indexname FROM pg_indexes WHERE tablename IN (%s, %s)",
                    [partitions.USAGE_TABLE, partitions.REQUEST_LOG_TABLE],
                )
                indexes = {row[0] for row in cursor.fetchall()}
            # The key's row triggers stay as 0007 made them, both ways.
            assert triggers == {
                f"{KEYS}_claim": True,
                f"{KEYS}_free": True,
                f"{KEYS}_rename": True,
                f"{KEYS}_truncate": False,
            }
            assert len(indexes) == (19 if target else 14)
            assert (indexes >= DROPPED) if target else not (DROPPED & indexes)
