"""Monthly partitions of the usage records and the request log (PostgreSQL only).

On PostgreSQL both tables are declaratively partitioned by RANGE (`created_at`), one partition a
calendar month (UTC), plus a DEFAULT partition that takes any row outside the months created, so
an INSERT never fails for want of a partition. The embedded default (SQLite) keeps plain tables:
every function here is a no-op there.

Why `created_at`: every dashboard, the request log's list and export, and retention filter on
it, so PostgreSQL prunes to the months a query asks for (docs/scaling.md shows the plans).

Keys. PostgreSQL requires a unique index of a partitioned table to contain the partition key:
- the request log's `reqlog_request_once` becomes UNIQUE (request_id, started_at, created_at).
  This keeps the writer's `ON CONFLICT DO NOTHING` idempotent because a log row's `created_at`
  is set once, when the gateway builds the row (`fields["created_at"]`), before any write
  attempt; every retry of that row sends the very same values (billing/recorder.py builds the
  INSERT parameters from the same dict). A replay therefore always collides.
- usage records are different: the writer stamps `created_at` per write attempt (a spool
  replay or the sweeper's estimate is written later with a later `created_at`), so a key with
  `created_at` in it would let a replay through and bill a request twice. The global
  `UNIQUE (request_id)` is therefore kept in a narrow, unpartitioned key table
  (`billing_usagerecord_request_key`), kept by row triggers on the partitioned table
  (INSERT claims the id, DELETE frees it, a changed request_id moves it; the migration 0007
  creates them): a duplicate request id still fails the INSERT with a unique violation in the same
  statement, exactly as before, so recorder.py's collision path (`_already_stored`, the
  suffixed id for a reused caller id) is unchanged. The key table grows like the old unique
  index did (one short key per record) and is never pruned: usage records are kept forever.
- the primary keys become (id, created_at); ids still come from one sequence.

Usage partitions are never dropped; request-log partitions are dropped whole once their newest
possible row is past EZAT_REQUEST_LOG_RETENTION_DAYS (`drop_expired_request_log`), so a row
lives up to one month longer than the retention.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

logger = logging.getLogger(__name__)

USAGE_TABLE = "billing_usagerecord"
REQUEST_LOG_TABLE = "billing_requestlog"
TABLES = (USAGE_TABLE, REQUEST_LOG_TABLE)
PARTITION_KEY = "created_at"
USAGE_KEY_TABLE = "billing_usagerecord_request_key"
# Creating or attaching a partition takes a lock on the parent; never queue the hot path's
# INSERTs behind it for long: give up and let the next beat run try again.
LOCK_TIMEOUT = "5s"


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    start: datetime | None  # None: the default partition
    end: datetime | None


def month_floor(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def add_months(month: datetime, n: int) -> datetime:
    index = month.year * 12 + month.month - 1 + n
    return month.replace(year=index // 12, month=index % 12 + 1)


def partition_name(table: str, month: datetime) -> str:
    return f"{table}_p{month.year:04d}_{month.month:02d}"


def default_name(table: str) -> str:
    return f"{table}_default"


def enabled() -> bool:
    return connection.vendor == "postgresql"


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def is_partitioned(table: str) -> bool:
    """Whether `table` is a partitioned table (never on SQLite; on PostgreSQL after 0007)."""
    if not enabled():
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [table]
        )
        return cursor.fetchone() is not None


def partitions(table: str) -> list[Partition]:
    """The partitions of `table`, oldest first, the default last."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = to_regclass(%s)
            """,
            [table],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        if bound == "DEFAULT":
            found.append(Partition(name, None, None))
            continue
        # FOR VALUES FROM ('2026-12-01 00:00:00+00') TO ('2027-01-01 00:00:00+00')
        parts = bound.split("'")
        found.append(
            Partition(name, datetime.fromisoformat(parts[1]), datetime.fromisoformat(parts[3]))
        )
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(found, key=lambda p: p.start or far)


def _create_month(cursor: Any, table: str, month: datetime) -> bool:
    """Create `table`'s partition for `month` unless it exists; True if it was created.

    Rows of that month already in the default partition (written while the month had no
    partition) are moved into the new partition in the same transaction: PostgreSQL refuses
    to attach a range the default partition holds rows of.
    """
    name = partition_name(table, month)
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    if cursor.fetchone()[0]:
        return False
    start, end = month, add_months(month, 1)
    bounds = f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    parent, default, new = _quote(table), _quote(default_name(table)), _quote(name)
    key = _quote(PARTITION_KEY)
    # A table of its own first, then ATTACH: ATTACH takes only a SHARE UPDATE EXCLUSIVE lock
    # on the parent, which the hot path's INSERTs do not conflict with (CREATE TABLE ...
    # PARTITION OF would take an ACCESS EXCLUSIVE one). The ATTACH builds the partition's
    # indexes and clones the parent's triggers.
    cursor.execute(f"CREATE TABLE {new} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    # Moved by DELETE + INSERT into the table before it is attached (it has no triggers yet):
    # the DELETE frees the usage records' request ids in the key table, reclaimed below in
    # the same transaction, so no other insert can take one meanwhile (it waits on our lock).
    cursor.execute(
        f"WITH moved AS (DELETE FROM {default} WHERE {key} >= %s AND {key} < %s RETURNING *) "
        f"INSERT INTO {new} SELECT * FROM moved",
        [start, end],
    )
    moved = cursor.rowcount
    if moved:
        logger.warning(
            "rows moved out of the default partition", extra={"partition": name, "rows": moved}
        )
    cursor.execute(f"ALTER TABLE {parent} ATTACH PARTITION {new} {bounds}")
    if moved and table == USAGE_TABLE:
        cursor.execute(
            f"INSERT INTO {_quote(USAGE_KEY_TABLE)} (request_id) SELECT request_id FROM {new}"
        )
    return True


def ensure_partitions(
    *,
    months_ahead: int | None = None,
    now: datetime | None = None,
    since: datetime | None = None,
) -> list[str]:
    """Create the partitions of this month and the next `months_ahead` months (default
    EZAT_PARTITION_MONTHS_AHEAD) for both tables, and of every month from `since` on when given
    (an operator back-filling history); returns the names created. Idempotent: what exists is
    left alone, so beat, the management command and a second worker may all run it."""
    if not enabled():
        return []
    ahead = settings.EZAT_PARTITION_MONTHS_AHEAD if months_ahead is None else months_ahead
    this_month = month_floor(now or timezone.now())
    first = min(month_floor(since), this_month) if since is not None else this_month
    months = []
    month = first
    while month <= add_months(this_month, ahead):
        months.append(month)
        month = add_months(month, 1)
    created = []
    for table in TABLES:
        if not is_partitioned(table):
            continue
        for month in months:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                if _create_month(cursor, table, month):
                    created.append(partition_name(table, month))
    if created:
        logger.info("partitions created", extra={"partitions": created})
    return created


def drop_expired_request_log(*, now: datetime | None = None) -> tuple[list[str], int]:
    """Drop request-log partitions whose whole month is older than the retention, and delete
    expired rows of the default partition; returns the partitions dropped and the rows deleted.
    Usage partitions are never touched. Idempotent."""
    if not is_partitioned(REQUEST_LOG_TABLE):
        return [], 0
    cutoff = (now or timezone.now()) - timedelta(days=settings.EZAT_REQUEST_LOG_RETENTION_DAYS)
    dropped = []
    for part in partitions(REQUEST_LOG_TABLE):
        if part.end is None or part.end > cutoff:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            # DETACH then DROP: the parent is locked only for the detach.
            cursor.execute(
                f"ALTER TABLE {_quote(REQUEST_LOG_TABLE)} DETACH PARTITION {_quote(part.name)}"
            )
            cursor.execute(f"DROP TABLE {_quote(part.name)}")
        dropped.append(part.name)
    with connection.cursor() as cursor:
        key = _quote(PARTITION_KEY)
        cursor.execute(
            f"DELETE FROM {_quote(default_name(REQUEST_LOG_TABLE))} WHERE {key} < %s", [cutoff]
        )
        deleted = cursor.rowcount
    if dropped:
        logger.info("request-log partitions dropped", extra={"partitions": dropped})
    return dropped, deleted
