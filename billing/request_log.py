"""The request log's writes: rows built by the gateway, inserted by the usage writer's group
commit (billing/recorder.py), and deleted past their retention.

A row is one authenticated request as its caller saw it (see `RequestLog`). The gateway hands
rows to `submit()` without awaiting them: the log is not the bill, so a request never waits for
its log row, and a row lost to a database outage is counted, never retried forever.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone
from prometheus_client import Counter

from billing.row_adapt import adapters

COLUMNS = (
    "request_id", "org_id", "api_key_id", "api", "stream", "model_name", "model_id",
    "requested_model", "deployment", "status", "http_status", "error_type", "error_message",
    "finish_reason", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens", "cost_nano",
    "output_exact", "hold_nano", "attempts", "admitted_ms", "ttft_ms", "latency_ms", "count",
    "started_at", "created_at",
)  # fmt: skip
_JSON = frozenset({"attempts"})
_TIMES = frozenset({"started_at", "created_at"})
# A message longer than this is cut: the caller saw it whole, the log keeps its start.
MAX_MESSAGE = 2000
# Free text a caller or an upstream wrote, cut to its column (the caller saw it whole). Labels
# the gateway itself writes (api, status) and the request id are not cut: one that does not fit
# is a bug, so the database refuses that row, the writer quarantines it and counts it, and an
# operator sees it (billing/request_log_quarantine.py), instead of a label silently cut short.
_CUT = {
    "model_name": 128, "model_id": 128, "requested_model": 128, "deployment": 100,
    "error_type": 64, "error_message": MAX_MESSAGE, "finish_reason": 32,
}  # fmt: skip
_TEXT = ("request_id", "api", "status", *_CUT)
# PostgreSQL text and jsonb cannot hold NUL (U+0000); the row is kept with the replacement
# character in its place (one character for one, so nothing else moves or grows).
NUL = "\x00"
NUL_STANDIN = "\ufffd"
DEFAULT_PURGE_BATCH = 5000

DROPPED = Counter(
    "ezat_request_log_dropped_total",
    "Request-log rows not written (writer backlog full or a failed batch)",
    ["reason"],
)
PARTITIONS_DROPPED = Counter(
    "ezat_request_log_partitions_dropped_total",
    "Monthly request-log partitions dropped by retention (PostgreSQL)",
)
QUARANTINED = Counter(
    "ezat_request_log_quarantined_total",
    "Request-log rows the database refused, set aside in the quarantine file for replay "
    "(the other rows of their batch are stored)",
    ["reason"],
)
COLLAPSED = Counter(
    "ezat_request_log_collapsed_total", "Refusals folded into an existing row of the same second"
)


@cache
def insert_sql() -> str:
    from billing.models import RequestLog

    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in COLUMNS)
    marks = ", ".join(["%s"] * len(COLUMNS))
    # Idempotent: a row already stored (same request id and start, the `reqlog_request_once`
    # constraint) is skipped, so a batch retried after a lost connection or a lost commit
    # answer writes nothing twice. PostgreSQL and SQLite (3.24+) both take this form.
    return (
        f"INSERT INTO {quote(RequestLog._meta.db_table)} ({columns}) VALUES ({marks}) "
        "ON CONFLICT DO NOTHING"
    )


def clean(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` made storable, in place: NUL replaced in every text and JSON string, free text
    cut to its column. A row with a NUL in its model name or error message (a caller's bytes)
    was refused by PostgreSQL, and with it its whole batch (issue 31)."""
    for column in _TEXT:
        value = fields[column]
        if not isinstance(value, str):
            continue
        if NUL in value:
            value = value.replace(NUL, NUL_STANDIN)
        limit = _CUT.get(column)
        if limit is not None and len(value) > limit:
            value = value[:limit]
        fields[column] = value
    fields["attempts"] = _without_nul(fields["attempts"])
    return fields


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(NUL, NUL_STANDIN) if NUL in value else value
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def db_row(fields: dict[str, Any]) -> list[Any]:
    """`fields` as INSERT parameters, in COLUMNS order (after `clean`)."""
    json_param, datetime_param = adapters()
    clean(fields)
    row = []
    for column in COLUMNS:
        value = fields[column]
        if column in _JSON:
            value = json_param(value)
        elif column in _TIMES:
            value = datetime_param(value)
        row.append(value)
    return row


def insert_rows(rows: list[list[Any]]) -> None:
    """The writer thread's INSERT (SQLite; PostgreSQL goes through the async inserter), and the
    quarantine replay's (either database)."""
    with connection.cursor() as cursor:
        if len(rows) == 1:
            # One row as one statement: psycopg's executemany (pipeline mode) reports a row
            # PostgreSQL refused as a broken pipeline and leaves the connection unusable.
            cursor.execute(insert_sql(), rows[0])
        else:
            cursor.executemany(insert_sql(), rows)


class Collapser:
    """Refusals of one key and reason within one wall-clock second become one row with a count.

    The first refusal of a (key, status, reason, second) is held here; later ones in the same
    second only add to its count. Held rows go to the writer once their second is over (at the
    next submit, or by the timer the first one armed), so a flood of 429s writes one row a
    second per key and reason.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._armed = False

    def add(self, fields: dict[str, Any], now: float) -> dict[str, Any] | None:
        """The held row the refusal was folded into, or None when `fields` is now held."""
        second = int(now)
        key = (fields["api_key_id"], fields["http_status"], fields["error_type"],
               fields["error_message"][:200], second)  # fmt: skip
        held = self._held.get(key)
        if held is not None:
            held["count"] += 1
            COLLAPSED.inc()
            return held
        self._held[key] = fields
        return None

    def due(self, now: float) -> list[dict[str, Any]]:
        """Rows of seconds that are over."""
        second = int(now)
        done = [k for k in self._held if k[-1] < second]
        return [self._held.pop(k) for k in done]

    def pending(self) -> bool:
        return bool(self._held)

    def drain(self) -> list[dict[str, Any]]:
        rows, self._held = list(self._held.values()), {}
        return rows


def purge_expired(
    *, batch_size: int = DEFAULT_PURGE_BATCH, max_batches: int = 100, now: datetime | None = None
) -> int:
    """Remove request-log rows older than the retention; returns the rows deleted one by one.
    Usage records and the ledger are separate tables and never touched. Idempotent.

    PostgreSQL (partitioned by month, billing/partitions.py): whole partitions past the
    retention are dropped (no row-by-row DELETE, no bloat, no vacuum debt), and only stray rows
    of the default partition are deleted (those are counted). SQLite: rows deleted in short
    batches (beat's next run continues)."""
    from billing import partitions
    from billing.models import RequestLog

    if partitions.is_partitioned(partitions.REQUEST_LOG_TABLE):
        dropped, deleted = partitions.drop_expired_request_log(now=now)
        PARTITIONS_DROPPED.inc(len(dropped))
        return deleted
    cutoff = (now or timezone.now()) - timedelta(days=settings.EZAT_REQUEST_LOG_RETENTION_DAYS)
    total = 0
    for _ in range(max_batches):
        ids = list(
            RequestLog.objects.filter(created_at__lt=cutoff)
            .order_by()
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            break
        deleted, _ = RequestLog.objects.filter(id__in=ids).delete()
        total += deleted
    return total


def wall_clock() -> float:
    return time.time()


def mirror_usage(record: Any, **overrides: Any) -> Any:
    """The request-log row the gateway writes for a recorded request, made from its usage
    record (fixtures, and usage written outside the gateway)."""
    from billing.models import RequestLog

    values: dict[str, Any] = {
        "request_id": record.request_id,
        "org_id": record.org_id,
        "api_key_id": record.api_key_id,
        "api": record.api,
        "stream": record.stream,
        "model_name": record.model_name,
        "model_id": record.model_id,
        "requested_model": record.requested_model or record.model_id,
        "deployment": record.deployment,
        # A stream that failed after its first token is billed but was an error to its caller.
        "status": "error" if record.status == "stream_failed" else record.status,
        "http_status": {"client_disconnected": 499, "stream_failed": 502}.get(record.status, 200),
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_5m_tokens": record.cache_write_5m_tokens,
        "cache_write_1h_tokens": record.cache_write_1h_tokens,
        "reasoning_tokens": record.reasoning_tokens,
        "cost_nano": record.cost_nano,
        "output_exact": record.output_exact,
        "attempts": record.attempts,
        "ttft_ms": record.ttft_ms,
        "latency_ms": record.latency_ms,
        "started_at": record.started_at,
        "created_at": record.created_at,
        **overrides,
    }
    return RequestLog.objects.create(**values)
