"""Issue 18: usage records and the request log become monthly partitioned tables (PostgreSQL).

PostgreSQL only: on SQLite (the embedded default) both tables stay plain and this migration does
nothing. The Django model state does not change, so no state operation is needed: the models keep
`id` as their primary key, `UsageRecord.request_id` unique and `reqlog_request_once`; on
PostgreSQL the database enforces the same with the partition key added (billing/partitions.py
explains each key and why a replay still collides).

The conversion runs in the migration's one transaction, per table:
1. note the table's indexes, foreign keys and CHECK constraints;
2. create a new parent `PARTITION BY RANGE (created_at)` with the same columns and defaults,
   one partition per month from the oldest row's month to EZAT_PARTITION_MONTHS_AHEAD months
   ahead, and a DEFAULT partition;
3. copy every row into it, drop the old table, give the new one the old name (its identity
   sequence too, moved past the highest id);
4. recreate the primary key as (id, created_at), every index and foreign key under its old name,
   and the unique keys with the partition key (request log) or in the key table (usage).
The tables are locked for the copy: on a large installation run it in a maintenance window.

Forward is idempotent (an already partitioned table is skipped). Backward does nothing: the
partitioned tables serve the previous migration's state unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import migrations

KEY = "created_at"
USAGE = "billing_usagerecord"
REQUEST_LOG = "billing_requestlog"
USAGE_KEYS = "billing_usagerecord_request_key"


def _month(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _next(month: datetime) -> datetime:
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def _fetch(cursor: Any, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    cursor.execute(sql, params or [])
    return cursor.fetchall()


def _convert(cursor: Any, table: str, ahead: int) -> None:
    if _fetch(cursor, "SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass", [table]):
        return
    new = f"{table}__partitioned"
    cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    (pkey,) = _fetch(
        cursor,
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
        [table],
    )[0]
    # Plain indexes (constraint-backed ones are recreated below with the partition key).
    indexes = _fetch(
        cursor,
        """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()
          AND tablename = %s AND indexname NOT IN (
            SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)
        """,
        [table, table],
    )
    uniques = _fetch(
        cursor,
        """
        SELECT conname, array_agg(a.attname ORDER BY k.ord) FROM pg_constraint c
        CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
        WHERE c.conrelid = %s::regclass AND c.contype = 'u' GROUP BY conname
        """,
        [table],
    )
    foreign = _fetch(
        cursor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    cursor.execute(
        f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        f"INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE ({KEY})"
    )
    now_month = _month(datetime.now(UTC))
    ((oldest,),) = _fetch(cursor, f"SELECT min({KEY}) FROM {table}")
    month = min(_month(oldest), now_month) if oldest is not None else now_month
    last = now_month
    for _ in range(ahead):
        last = _next(last)
    while month <= last:
        end = _next(month)
        cursor.execute(
            f"CREATE TABLE {table}_p{month.year:04d}_{month.month:02d} PARTITION OF {new} "
            f"FOR VALUES FROM ('{month.isoformat()}') TO ('{end.isoformat()}')"
        )
        month = end
    cursor.execute(f"CREATE TABLE {table}_default PARTITION OF {new} DEFAULT")
    cursor.execute(f"INSERT INTO {new} SELECT * FROM {table}")
    if table == USAGE:
        # The global request-id key (see billing/partitions.py), filled from the copied rows.
        cursor.execute(f"CREATE TABLE {USAGE_KEYS} (request_id varchar(160) PRIMARY KEY)")
        cursor.execute(f"INSERT INTO {USAGE_KEYS} SELECT request_id FROM {table}")
    cursor.execute(f"DROP TABLE {table}")
    cursor.execute(f"ALTER TABLE {new} RENAME TO {table}")
    ((sequence,),) = _fetch(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", [table])
    cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {table}_id_seq")
    cursor.execute(
        f"SELECT setval('{table}_id_seq', coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
    )
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {pkey} PRIMARY KEY (id, {KEY})")
    for _name, definition in indexes:
        cursor.execute(definition)
    for name, columns in uniques:
        if table == USAGE and list(columns) == ["request_id"]:
            # Lookups by request id keep an index; uniqueness moves to the key table.
            cursor.execute(f"CREATE INDEX {name} ON {table} (request_id)")
            continue
        if KEY not in columns:
            columns = [*columns, KEY]
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({', '.join(columns)})")
    for name, definition in foreign:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    if table == USAGE:
        _usage_key_triggers(cursor)


def _usage_key_triggers(cursor: Any) -> None:
    """Every inserted record claims its request id in the key table: a second record with the
    same id fails its INSERT with a unique violation, as the old UNIQUE (request_id) did. A
    deleted record frees its id, as it did; so does a record moved to another partition by an
    UPDATE of `created_at` (PostgreSQL runs that as DELETE + INSERT and fires both row
    triggers, the delete's first). TRUNCATE (test flushes) empties the key table too."""
    cursor.execute(
        f"""
        CREATE FUNCTION {USAGE_KEYS}_claim() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {USAGE_KEYS} (request_id) VALUES (NEW.request_id);
            RETURN NULL;
        END $$;
        CREATE FUNCTION {USAGE_KEYS}_free() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM {USAGE_KEYS} WHERE request_id = OLD.request_id;
            RETURN NULL;
        END $$;
        CREATE FUNCTION {USAGE_KEYS}_rename() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM {USAGE_KEYS} WHERE request_id = OLD.request_id;
            INSERT INTO {USAGE_KEYS} (request_id) VALUES (NEW.request_id);
            RETURN NULL;
        END $$;
        CREATE FUNCTION {USAGE_KEYS}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            TRUNCATE {USAGE_KEYS};
            RETURN NULL;
        END $$;
        CREATE TRIGGER {USAGE_KEYS}_claim AFTER INSERT ON {USAGE}
            FOR EACH ROW EXECUTE FUNCTION {USAGE_KEYS}_claim();
        CREATE TRIGGER {USAGE_KEYS}_free AFTER DELETE ON {USAGE}
            FOR EACH ROW EXECUTE FUNCTION {USAGE_KEYS}_free();
        CREATE TRIGGER {USAGE_KEYS}_rename AFTER UPDATE OF request_id ON {USAGE}
            FOR EACH ROW WHEN (OLD.request_id IS DISTINCT FROM NEW.request_id)
            EXECUTE FUNCTION {USAGE_KEYS}_rename();
        CREATE TRIGGER {USAGE_KEYS}_truncate AFTER TRUNCATE ON {USAGE}
            FOR EACH STATEMENT EXECUTE FUNCTION {USAGE_KEYS}_truncate();
        """
    )


def partition(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    ahead = int(getattr(settings, "EZAT_PARTITION_MONTHS_AHEAD", 3))
    with schema_editor.connection.cursor() as cursor:
        for table in (USAGE, REQUEST_LOG):
            _convert(cursor, table, ahead)


class Migration(migrations.Migration):
    # One transaction: a failure anywhere leaves both tables as they were.
    atomic = True

    dependencies = [
        ("billing", "0006_request_log_written_once"),
    ]

    operations = [
        migrations.RunPython(partition, migrations.RunPython.noop, elidable=False),
    ]
