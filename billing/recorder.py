"""Writing usage records from the gateway's hot path.

The cost is computed here, once, from the price version the request was admitted with, at the
tier its actual prompt falls in, and stored with that tier's prices and the version's id, so a
later price change never rewrites history. The gateway awaits this before it
sends `[DONE]` / `message_stop`: a client that saw the end of a stream has been recorded, in the
database or, when the database cannot take it, in the durable local spool (billing/spool.py),
which the retry loop replays into the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from prometheus_client import Counter, Gauge

from billing.row_adapt import adapters, is_postgresql
from catalog.pricing import PriceSchedule, PriceTier, TokenCounts, cost_nano

if TYPE_CHECKING:
    from billing.pg_async import AsyncPgInserter

logger = logging.getLogger(__name__)

DUPLICATE_REQUEST_IDS = Counter(
    "ezat_usage_duplicate_request_ids_total",
    "Caller-supplied request ids reused; the record was stored under a suffixed id.",
)


HELD_RECORDS = Gauge(
    "ezat_usage_held_in_memory",
    "Usage records neither the database nor the spool took, kept in memory until one does",
)
HELD_TOTAL = Counter(
    "ezat_usage_records_held_total",
    "Usage records that had to be kept in memory (database and spool both failed)",
)
REFUSED_UNRECORDABLE = Counter(
    "ezat_usage_unrecordable_refusals_total",
    "Requests answered 503 before any upstream work because usage could not be recorded",
)


@dataclass(slots=True)
class UsageData:
    request_id: str
    org_id: int
    key_id: int | None
    api: str
    stream: bool
    model_id: str
    model_name: str
    deployment: str
    tokens: TokenCounts
    pricing: PriceSchedule
    started_at: datetime
    output_exact: bool = True
    status: str = "ok"
    attempts: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: int = 0
    ttft_ms: int | None = None
    # The canonical id of the model asked for; model_id is the one that answered (and billed).
    requested_model: str = ""

    @property
    def tier(self) -> PriceTier:
        """The tier this request is billed at: the one its actual prompt falls in."""
        return self.pricing.tier_for(self.tokens.prompt)

    @property
    def cost_nano(self) -> int:
        return cost_nano(self.tokens, self.tier.prices)


def _fields(data: UsageData, cost: int) -> dict[str, Any]:
    return {
        "request_id": data.request_id,
        "org_id": data.org_id,
        "api_key_id": data.key_id,
        "api": data.api,
        "stream": data.stream,
        "model_id": data.model_id,
        "model_name": data.model_name[:128],
        "requested_model": (data.requested_model or data.model_id)[:128],
        "deployment": data.deployment,
        "input_tokens": data.tokens.input,
        "output_tokens": data.tokens.output,
        "cache_read_tokens": data.tokens.cache_read,
        "cache_write_5m_tokens": data.tokens.cache_write_5m,
        "cache_write_1h_tokens": data.tokens.cache_write_1h,
        "reasoning_tokens": data.tokens.reasoning,
        "cost_nano": cost,
        "prices": data.tier.as_public(),
        "price_version": data.pricing.version or None,
        "output_exact": data.output_exact,
        "status": data.status,
        "attempts": data.attempts,
        "latency_ms": data.latency_ms,
        "ttft_ms": data.ttft_ms,
        "started_at": data.started_at,
    }


def _already_stored(fields: dict[str, Any]) -> bool:
    """Whether this very request (same org, same start) is stored, under its id or a suffixed
    one: the test that makes a retry, a replay or a sweep of the same record a no-op."""
    from django.db.models import Q

    from billing.models import UsageRecord

    rid = fields["request_id"]
    return UsageRecord.objects.filter(
        Q(request_id=rid) | Q(request_id__startswith=f"{rid}~"),
        org_id=fields["org_id"],
        started_at=fields["started_at"],
    ).exists()


def insert_idempotent(fields: dict[str, Any]) -> bool:
    """Insert one record unless this request is already stored; True if it was inserted.

    Idempotent by request id (with its org and start time): a retry, a spool replay or a
    sweeper's estimate of a request that was recorded stores nothing. A caller reusing its own
    x-request-id gets its other request stored under a suffixed id, as on the hot path.
    """
    from billing.models import UsageRecord

    try:
        with transaction.atomic():
            UsageRecord.objects.create(**fields)
        return True
    except IntegrityError:
        if _already_stored(fields):
            return False  # our own row, committed by an attempt whose answer was lost: not twice
        # A caller reusing its own x-request-id: both requests really ran, so both are billed;
        # the second is stored under a suffixed id rather than lost.
        DUPLICATE_REQUEST_IDS.inc()
        fields["request_id"] = f"{fields['request_id']}~{uuid.uuid4().hex[:8]}"
        UsageRecord.objects.create(**fields)
        return True


_insert_one = insert_idempotent


# Columns written by the hot path, in order; the rest of the table keeps its defaults.
_COLUMNS = (
    "request_id", "org_id", "api_key_id", "api", "stream", "model_id", "model_name",
    "requested_model", "deployment", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens", "cost_nano", "prices",
    "price_version", "output_exact", "status", "attempts", "latency_ms", "ttft_ms", "started_at",
    "created_at",
)  # fmt: skip
_JSON_COLUMNS = frozenset({"prices", "attempts"})


@cache
def _insert_sql() -> str:
    from billing.models import UsageRecord

    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in _COLUMNS)
    marks = ", ".join(["%s"] * len(_COLUMNS))
    return f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) VALUES ({marks})"


def _row(fields: dict[str, Any], now: datetime) -> list[Any]:
    json_param, datetime_param = adapters()
    row = []
    for column in _COLUMNS:
        # created_at: the group-commit log's records keep the time their request was logged.
        value = (fields.get("created_at") or now) if column == "created_at" else fields[column]
        if column in _JSON_COLUMNS:
            value = json_param(value)
        elif column in ("started_at", "created_at"):
            value = datetime_param(value)
        row.append(value)
    return row


def _insert_batch(batch: list[dict[str, Any]]) -> None:
    """The writer thread's INSERT (SQLite; PostgreSQL is written from the loop, pg_async.py).
    All rows in one executemany, autocommit:
    no BEGIN/COMMIT round trips and no model instances — the ORM cost more than the INSERT.
    Row by row (idempotently) only if a request id collides.

    No per-batch `close_old_connections()`: with health checks on, that costs a `SELECT 1`
    round trip per batch. A connection that died is replaced and the batch retried once.
    """
    now = timezone.now()
    for attempt in (1, 2):
        try:
            rows = [_row(fields, now) for fields in batch]
            with connection.cursor() as cursor:
                cursor.executemany(_insert_sql(), rows)
            return
        except IntegrityError:
            _insert_each(batch)
            return
        except (OperationalError, InterfaceError):
            if attempt == 2:
                raise
            connection.close()  # the next query opens a fresh connection


def _insert_each(batch: list[dict[str, Any]]) -> None:
    for fields in batch:
        _insert_one(fields)


def _close_thread_connection() -> None:
    connection.close()  # resolved in the calling thread: Django connections are per thread


def _log_flush_seconds() -> float:
    return float(settings.EZAT_REQUEST_LOG_FLUSH_SECONDS)


class DatabaseUnavailable(Exception):
    """The writer skipped the database, which failed moments ago (the batch was spooled)."""


class UsageWriter:
    """Group commit: records that arrive while a write is in flight go together in the next one.

    Every caller still awaits its own record's commit (so `[DONE]` means "recorded"), but under
    load N requests share one INSERT instead of N. Batches are written one at a time: on
    PostgreSQL from the event loop (billing/pg_async.py), elsewhere (SQLite) on the writer's own
    thread; either way the writer holds one DB connection per process.
    """

    def __init__(self, max_batch: int = 500) -> None:
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._max_batch = max_batch
        self._executor: ThreadPoolExecutor | None = None
        self._pg: AsyncPgInserter | None = None
        # After a failed write, batches go straight to the spool until then (monotonic).
        self._db_down_until = 0.0
        self.batch_sizes: list[int] = []  # the last few, for tests and debugging
        # Request-log rows (billing/request_log.py): a second queue of the same group commit,
        # written after the usage records of each round and never awaited by a request.
        self._log_pending: list[dict[str, Any]] = []
        self._log_collapser: Any = None
        self._log_timer: asyncio.TimerHandle | None = None
        # Records neither the database nor the spool took (the disk full or unwritable while
        # the database is down): kept here, retried by the durability loop (retry_held), and
        # while any are held no new billable request is admitted (accepting()).
        self._held: list[dict[str, Any]] = []
        # Log rows are written in batches: the first queued row waits up to
        # EZAT_REQUEST_LOG_FLUSH_SECONDS for others (or until a batch is full), so at low
        # concurrency a request costs no INSERT of its own. `_log_since`: when the oldest
        # queued row arrived (monotonic); `_log_force`: drain_log writes everything now.
        self._log_since = 0.0
        self._log_force = False
        self._log_wake: asyncio.TimerHandle | None = None

    async def _write_batch(self, batch: list[dict[str, Any]]) -> None:
        loop = asyncio.get_running_loop()
        if self._pg is None and is_postgresql():
            from billing.pg_async import AsyncPgInserter

            self._pg = AsyncPgInserter()
        self.batch_sizes = [*self.batch_sizes[-99:], len(batch)]
        if self._pg is None:
            await loop.run_in_executor(self._executor, _insert_batch, batch)
            return
        import psycopg

        now = timezone.now()
        try:
            await self._pg.insert(_insert_sql(), [_row(fields, now) for fields in batch])
        except psycopg.IntegrityError:
            # A request id seen before: row by row through the ORM on the thread, idempotently.
            await loop.run_in_executor(self._executor, _insert_each, batch)

    async def store_batch(
        self, records: list[dict[str, Any]], log_rows: list[dict[str, Any]] | None = None
    ) -> None:
        """Insert the usage records, then the request-log rows, now, idempotently, or raise
        (the group-commit log's flusher, billing/usage_log.py: its records are durable already,
        so nothing is spooled; a log row the database refuses is quarantined, as always)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-log")
        try:
            async with asyncio.timeout(settings.EZAT_USAGE_LOG_STORE_TIMEOUT_SECONDS):
                if records:
                    await self._write_batch(records)
                if log_rows:
                    # ON CONFLICT DO NOTHING: a retried batch stores no log row twice.
                    await self._write_log_batch(log_rows)
        except BaseException:
            # Whatever failed (a dead or hung connection, a lost commit answer), the next attempt
            # starts from fresh connections: Django never replaces a broken connection of a
            # thread outside a request by itself, and a row by row retry (a batch a lost commit
            # stored in part) runs on that thread. Rows already stored are skipped then.
            if self._pg is not None:
                self._pg.close()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, _close_thread_connection)
            raise

    async def write(self, fields: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((fields, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        await asyncio.shield(future)

    # --- the request log's queue (additive: the usage path above is unchanged) ---------------
    def submit_log(self, fields: dict[str, Any], *, refusal: bool = False) -> bool:
        """Queue a request-log row; returns at once (the request does not wait for it).
        A refusal may be folded into a row of the same key, reason and second: then False
        (no new row), as when the backlog is full."""
        from billing import request_log

        loop = asyncio.get_running_loop()
        now = request_log.wall_clock()
        collapser = self._log_collapser
        if collapser is None:
            collapser = self._log_collapser = request_log.Collapser()
        self._queue_log(collapser.due(now))
        new = True
        if refusal:
            new = collapser.add(fields, now) is None
            if new and self._log_timer is None:
                # Hand the held row over once its second is over, even if nothing else comes.
                self._log_timer = loop.call_later(1.05 - now % 1, self._release_held)
        elif len(self._log_pending) >= settings.EZAT_REQUEST_LOG_MAX_PENDING:
            request_log.DROPPED.labels("backlog").inc()
            return False
        else:
            self._queue_log([fields])
        self._schedule_log(loop)
        return new

    def _queue_log(self, rows: list[dict[str, Any]]) -> None:
        """Rows ready to be written. With EZAT_USAGE_COMMIT=group they go to the group-commit
        log (billing/usage_log.py: fsync'd with the usage rows, stored by its flusher, replayed
        after a crash); rows it cannot take, and every row with `direct`, to this queue."""
        if rows and settings.EZAT_USAGE_COMMIT == "group":
            from billing import usage_log

            rows = usage_log.usage_log.log_request_rows(rows)
        self.queue_log_direct(rows)

    def queue_log_direct(self, rows: list[dict[str, Any]]) -> None:
        """Rows for this writer's own batches (not awaited, dropped if the database fails)."""
        if not rows:
            return
        self._log_pending.extend(rows)
        self._schedule_log(asyncio.get_running_loop())

    def _schedule_log(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write queued log rows once the oldest has waited the flush delay (or a batch is
        full): a timer for the first row, the flusher at once for a full batch."""
        if not self._log_pending:
            return
        if not self._log_since:
            self._log_since = time.monotonic()
        if len(self._log_pending) >= self._max_batch:
            self._start_flusher(loop)
        elif self._log_wake is None:
            delay = max(0.0, self._log_since + _log_flush_seconds() - time.monotonic())
            self._log_wake = loop.call_later(delay, self._log_wake_up)

    def _log_wake_up(self) -> None:
        self._log_wake = None
        self._start_flusher(asyncio.get_running_loop())

    def _start_flusher(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())

    def _log_due(self) -> bool:
        if not self._log_pending:
            return False
        return (
            self._log_force
            or len(self._log_pending) >= self._max_batch
            or time.monotonic() - self._log_since >= _log_flush_seconds()
        )

    def _release_held(self) -> None:
        from billing import request_log

        self._log_timer = None
        collapser = self._log_collapser
        self._queue_log(collapser.due(request_log.wall_clock()))
        if collapser.pending():
            now = request_log.wall_clock()
            self._log_timer = asyncio.get_running_loop().call_later(
                1.05 - now % 1, self._release_held
            )
        self._schedule_log(asyncio.get_running_loop())

    @property
    def log_queue_depth(self) -> int:
        return len(self._log_pending)

    @property
    def usage_queue_depth(self) -> int:
        return len(self._pending)

    def lag_seconds(self) -> float:
        """How long the oldest queued row has waited (its request's end; /metrics)."""
        oldest = self._log_pending[0]["created_at"] if self._log_pending else None
        if oldest is None:
            return 0.0
        return max((timezone.now() - oldest).total_seconds(), 0.0)

    async def _write_log_batch(self, batch: list[dict[str, Any]]) -> None:
        """Insert the batch; a row the database refuses is quarantined, the others stored
        (billing/request_log_quarantine.py). Raises only when the database is unreachable."""
        from billing import request_log
        from billing import request_log_quarantine as quarantine

        kept: list[dict[str, Any]] = []
        rows: list[list[Any]] = []
        for fields in batch:
            try:
                rows.append(request_log.db_row(fields))
            except quarantine.INSERT_ERRORS as exc:  # a value no INSERT could take
                quarantine.keep(fields, exc)
            else:
                kept.append(fields)
        await self._insert_log_rows(kept, rows)

    async def _insert_log_rows(self, batch: list[dict[str, Any]], rows: list[list[Any]]) -> None:
        from billing import request_log_quarantine as quarantine

        if not rows:
            return
        try:
            await self._insert_log(rows)
        except quarantine.INSERT_ERRORS as exc:
            if not quarantine.refused(exc):
                raise  # unreachable: the batch is counted as dropped by _flush_log
            if len(rows) == 1:
                quarantine.keep(batch[0], exc)
                return
            # Halves until the refused rows stand alone: one bad row costs ~2·log2(n) INSERTs,
            # and rows a half already stored are skipped by ON CONFLICT DO NOTHING.
            half = len(rows) // 2
            await self._insert_log_rows(batch[:half], rows[:half])
            await self._insert_log_rows(batch[half:], rows[half:])

    async def _insert_log(self, rows: list[list[Any]]) -> None:
        from billing import request_log

        if self._pg is None and is_postgresql():
            from billing.pg_async import AsyncPgInserter

            self._pg = AsyncPgInserter()
        if self._pg is None:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, request_log.insert_rows, rows
            )
            return
        await self._pg.insert(request_log.insert_sql(), rows)

    async def _flush_log(self) -> None:
        from billing import request_log

        batch = self._log_pending[: self._max_batch]
        del self._log_pending[: self._max_batch]
        # Rows left behind (a full batch went) start their wait now.
        self._log_since = time.monotonic() if self._log_pending else 0.0
        try:
            await self._write_log_batch(batch)
        except Exception:  # the log is not the bill: counted and logged, the rows dropped
            request_log.DROPPED.labels("write_failed").inc(len(batch))
            logger.exception("request log batch insert failed", extra={"rows": len(batch)})

    async def _flush(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-writer")
        while self._pending or self._log_due():
            if not self._pending or len(self._log_pending) >= self._max_batch:
                # Usage first (requests await it); the log when idle and due, or backed up.
                await self._flush_log()
                continue
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            records = [f for f, _ in batch]
            error: BaseException | None = None
            if time.monotonic() < self._db_down_until:
                error = DatabaseUnavailable("the database failed moments ago")
            else:
                try:
                    await self._write_batch(records)
                except Exception as exc:  # noqa: BLE001 - logged in _spool; the spool keeps them
                    error = exc
            if error is not None:
                error = await self._spool(records, error)
            for _, future in batch:
                if future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
        # Log rows left that are not due yet: their timer writes them.
        self._schedule_log(asyncio.get_running_loop())

    async def _spool(
        self, records: list[dict[str, Any]], error: BaseException
    ) -> BaseException | None:
        """The database did not take the batch: the spool does (durably, fsynced), so the
        answers still go out and are billed when the replay gets through. Returns the error
        to hand to the waiting requests: None once the spool has them."""
        from billing.spool import SpoolError, spool

        if not isinstance(error, DatabaseUnavailable):
            logger.warning(
                "usage batch insert failed; spooling",
                extra={"records": len(records)},
                exc_info=error,
            )
            # Straight to the spool for a moment: a dead database is not asked once per batch.
            self._db_down_until = time.monotonic() + settings.EZAT_USAGE_SPOOL_BYPASS_SECONDS
        try:
            await spool.append(records)
        except SpoolError:
            # The answers went out (or are about to): their bills must not be lost, and a 500
            # after the upstream did the work would help nobody. Held in memory, retried.
            logger.exception(
                "usage spool failed too; records held in memory",
                extra={"records": len(records), "held": repr(records)},
            )
            self._hold(records)
        return None

    # --- records neither store took ---------------------------------------------------------------
    def _hold(self, records: list[dict[str, Any]]) -> None:
        self._held.extend(records)
        HELD_TOTAL.inc(len(records))
        HELD_RECORDS.set(len(self._held))

    @property
    def held(self) -> int:
        """How many records are held in memory (neither the database nor the spool took them)."""
        return len(self._held)

    def accepting(self) -> bool:
        """Whether a new billable request may start: not while records are held in memory,
        that is while neither the database nor the spool can take a record. O(1), no I/O."""
        return not self._held

    async def retry_held(self) -> int:
        """Hand the held records to the database, else to the spool; returns how many were
        placed. Those neither takes stay held for the next round. Idempotent inserts: a record
        whose first write committed unseen is not stored twice."""
        from billing.spool import SpoolError, spool

        records, self._held = self._held, []
        if not records:
            return 0
        try:
            await self._write_batch(records)
        except Exception as db_error:  # noqa: BLE001 - logged; the spool is tried next
            logger.warning("held usage records: database still failing (%r)", db_error)
            try:
                await spool.append(records)
            except SpoolError:
                self._held = records + self._held
                HELD_RECORDS.set(len(self._held))
                return 0
        HELD_RECORDS.set(len(self._held))
        logger.warning("held usage records placed", extra={"records": len(records)})
        return len(records)

    async def drain_log(self) -> None:
        """Write every queued and held request-log row now (tests, shutdown)."""
        if self._log_collapser is not None:
            self._queue_log(self._log_collapser.drain())
        if settings.EZAT_USAGE_COMMIT == "group":
            from billing import usage_log

            await usage_log.usage_log.wait_flushed()
        self._log_force = True
        try:
            while self._log_pending or (self._flusher is not None and not self._flusher.done()):
                if self._flusher is None or self._flusher.done():
                    self._flusher = asyncio.get_running_loop().create_task(self._flush())
                await asyncio.shield(self._flusher)
        finally:
            self._log_force = False

    def close(self) -> None:
        """Close the writer's DB connections and stop its thread (tests, shutdown)."""
        if self._pg is not None:
            self._pg.close()
        if self._executor is not None:
            self._executor.submit(_close_thread_connection).result()
            self._executor.shutdown(wait=True)
            self._executor = None


writer = UsageWriter()


def record_fields(data: UsageData) -> dict[str, Any]:
    """The row of a request's usage, stamped with the time it is recorded (its created_at
    even when it reaches the database later: billing/usage_log.py)."""
    fields = _fields(data, data.cost_nano)
    fields["created_at"] = timezone.now()
    return fields


async def record_usage(data: UsageData) -> int:
    """Insert the record (group-committed); returns its cost in nano-USD."""
    cost = data.cost_nano
    await writer.write(_fields(data, cost))
    return cost
