"""Group-committed usage (EZAT_USAGE_COMMIT=group, issue 35 item 1): a request's usage row is
durable before its answer ends without a database round trip.

The request path: the row (with the limiter settlement it is owed) is appended to a local log
and fsync'd; concurrent requests share the fsync (the spool's group commit, billing/spool.py:
records queued while one write+fsync is in flight go together in the next, so under load one
fsync covers every request that ended during the previous one, at no added latency when alone).
The request awaits the fsync that covers its record, then answers; its limiter hold shrinks to
its cost (`Limiter.hold_unflushed`) instead of being charged.

The flusher (a task of the event loop) moves the log's records to the database in batches (the
first record of a batch waits EZAT_USAGE_LOG_FLUSH_SECONDS for others) with
the usage writer's idempotent insert (billing/recorder.py: one INSERT per batch, row by row
through `insert_idempotent` when a request id collides, so the same request twice is one row).
Once a batch is stored, its requests are settled in the limiter, the whole batch in one call
(the injected `settler`, gateway/apps.py → gateway/limits/batch.py; billing never imports the
limiter): each hold goes and its cost is charged. So
the limiter's `charged` only ever counts rows the database has, which the seeding arithmetic
relies on (gateway/limits/common.py), and until then the balance, the key caps and the dashboards
count the spend as the open hold it is (`open_holds_nano`): it never disappears and reappears.
While the database is down the records stay in the log, the flusher retries with a backoff,
requests keep being answered, and the rows land once the database is back. Memory is bounded:
at most EZAT_USAGE_LOG_MEMORY_RECORDS records wait in memory; the ones after are only counted
("spilled", per segment) and read back from their segments on disk once the queue has room
again. Spilling is sticky until every spilled record is back in the queue, so the records in
memory are always a prefix of each segment's records and the spilled ones the rest: a segment's
spilled records are its records from index `queued` on, and nothing is read back twice.

The log's files (`log-<host>-<pid>-<token>.jsonl`) are the spool's format (a CRC-32 and a
newline frame each record: a torn tail fails its checksum or lacks its newline and is skipped,
never half-read), in the spool's folder of this process's database (billing/spool_owner.py), and
under its lock rule (an exclusive flock for as long as the writer is alive). A segment is closed
after EZAT_USAGE_LOG_SEGMENT_RECORDS records or EZAT_USAGE_LOG_SEGMENT_SECONDS, kept locked
until all its records are stored, then deleted. After a SIGKILL the dead process's segments are
unlocked: the next start's durability round (gateway/durability.py) replays them like spool
files — idempotently, so a record stored before the crash is not stored twice — and settles
their requests. Another database's folder is never replayed.

Request-log rows (billing/request_log.py) go the same way: the writer hands each row, once
ready (a refusal after its second is folded, recorder.UsageWriter.submit_log), to
`log_request_rows`, a record of kind `request_log` in the same segments and fsyncs, never
awaited by the request; the flusher stores a batch's log rows after its usage rows, with the log
writer's idempotent insert (ON CONFLICT DO NOTHING on `reqlog_request_once`, refused rows
quarantined), and the replay after a crash stores them the same way: a request's row once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from prometheus_client import Counter, Gauge

from billing.recorder import UsageData, UsageWriter, record_fields, record_usage
from billing.spool import (
    KIND_FIELD,
    LOG_PREFIX,
    REQUEST_LOG_KIND,
    SETTLE_FIELD,
    SpoolError,
    UsageSpool,
    read_records,
)

logger = logging.getLogger(__name__)

LOG_FSYNCS = Counter("ezat_usage_log_fsyncs_total", "fsyncs of the group-commit usage log")
LOGGED = Counter("ezat_usage_log_records_total", "Usage records appended to the group-commit log")
FLUSHED = Counter("ezat_usage_log_flushed_total", "Logged usage records stored in the database")
FLUSH_FAILURES = Counter(
    "ezat_usage_log_flush_failures_total",
    "Batches of the usage log the database did not take (kept and retried)",
)
UNFLUSHED = Gauge(
    "ezat_usage_log_unflushed",
    "Usage records in the log (durable) not yet stored in the database and settled",
)
SPILLED = Counter(
    "ezat_usage_log_spilled_total",
    "Logged usage records kept only on disk (the memory queue was full: EZAT_USAGE_LOG_MEMORY_"
    "RECORDS), read back from their segment when the queue had room",
)

# (limits id, key id, org id, cost nano-USD) of every stored record whose request is owed a
# settlement: the limiter's settle, set by the gateway at start.
Settler = Callable[[list[dict[str, Any]]], Awaitable[None]]
_settler: Settler | None = None


def set_settler(settler: Settler | None) -> None:
    global _settler
    _settler = settler


def enabled() -> bool:
    return settings.EZAT_USAGE_COMMIT == "group"


@dataclass(slots=True)
class _Segment:
    logged: int = 0
    stored: int = 0
    queued: int = 0  # records handed to the memory queue (a prefix of the segment's records)
    spilled: int = 0  # records after those, on disk only (read back by UsageLog._reload)
    opened: float = 0.0  # monotonic
    fd: int | None = None  # set once detached (still locked)


class _LogFile(UsageSpool):
    """The log's current segment: the spool's group-fsync writer under the log's prefix."""

    prefix = LOG_PREFIX

    def __init__(self, directory: Path | None = None) -> None:
        super().__init__(directory)
        self.segments: dict[Path, _Segment] = {}

    def _count(self, records: int, path: Path) -> None:
        # Counted as the write lands, before any caller resumes: a segment is never deleted
        # while a record fsync'd into it waits to be queued for the flusher.
        LOGGED.inc(records)
        self.appended += records
        segment = self.segments.get(path)
        if segment is None:
            segment = self.segments[path] = _Segment(opened=time.monotonic())
        segment.logged += records

    def _count_fsync(self) -> None:
        LOG_FSYNCS.inc()

    async def detach(self) -> tuple[int, Path] | None:
        """Stop appending to the current segment but keep it open and locked (its records
        may not be stored yet: no replay may take it); the next append opens a new one."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        fd, path = self._fd, self._path
        self._fd = self._path = None
        if fd is None or path is None:
            return None
        return fd, path


class UsageLog:
    """The log, its segments' bookkeeping and the flusher."""

    def __init__(self, directory: Path | None = None, max_batch: int = 500) -> None:
        self.file = _LogFile(directory)
        self._store = UsageWriter(max_batch=max_batch)
        self._max_batch = max_batch
        self._queue: list[tuple[dict[str, Any], Path]] = []
        self._spilled = 0  # Σ segments' spilled records
        self._segments = self.file.segments
        self._flusher: asyncio.Task[None] | None = None
        self._backoff = 0.0
        self.batch_sizes: list[int] = []  # the last few, for tests

    @property
    def fsyncs(self) -> int:
        return self.file.fsyncs

    @property
    def unflushed(self) -> int:
        return len(self._queue) + self._spilled

    @property
    def in_memory(self) -> int:
        """Records waiting in memory (at most EZAT_USAGE_LOG_MEMORY_RECORDS)."""
        return len(self._queue)

    async def commit(self, fields: dict[str, Any], settle: dict[str, Any]) -> None:
        """Returns once the record is fsync'd in the log (raises SpoolError if it cannot be);
        the flusher stores it and then settles `settle` in the limiter."""
        record = {**fields, SETTLE_FIELD: settle}
        future = self.file.submit(record)
        # Queued for the flusher as soon as it is on disk, whether or not this caller is still
        # there to resume (a cancelled request's record is durable: it is stored all the same).
        future.add_done_callback(lambda done: self._logged(record, done))
        await asyncio.shield(future)

    def log_request_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append request-log rows to the log (a record kind of their own) without waiting:
        they share the usage rows' fsyncs, and the flusher stores them in the same batches,
        idempotently (ON CONFLICT DO NOTHING). Returns the rows it could not encode; a row
        whose write fails goes back to the writer's own queue (not durable, as in `direct`)."""
        refused = []
        for fields in rows:
            record = {**fields, KIND_FIELD: REQUEST_LOG_KIND}
            try:
                future = self.file.submit(record)
            except TypeError:  # a value JSON cannot hold: the writer's queue takes it as is
                refused.append(fields)
                continue
            future.add_done_callback(lambda done, r=record: self._logged(r, done))
        return refused

    def _logged(self, record: dict[str, Any], done: asyncio.Future[Path]) -> None:
        if done.cancelled() or done.exception() is not None:
            if record.get(KIND_FIELD) == REQUEST_LOG_KIND:
                from billing.recorder import writer

                row = dict(record)
                row.pop(KIND_FIELD)
                writer.queue_log_direct([row])  # not awaited by anyone: written the old way
            return  # not durable: the caller sees the error (and records it another way)
        path = done.result()
        segment = self._segments.get(path)  # None only once closed: then kept as it was
        if segment is not None and (
            self._spilled or len(self._queue) >= settings.EZAT_USAGE_LOG_MEMORY_RECORDS
        ):
            segment.spilled += 1  # durable in `path`: read back once the queue has room
            self._spilled += 1
            SPILLED.inc()
        else:
            if segment is not None:
                segment.queued += 1
            self._queue.append((record, path))
        UNFLUSHED.set(self.unflushed)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def wait_flushed(self) -> None:
        """Until every record logged so far is in the database (tests, shutdown)."""
        while self.unflushed or (self._flusher is not None and not self._flusher.done()):
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.get_running_loop().create_task(self._flush())
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        # Nobody awaits the flush (the records are durable already): the first record waits
        # for others so that at low concurrency too a batch shares one INSERT and one limiter
        # call that settles it, instead of one each per request.
        await asyncio.sleep(settings.EZAT_USAGE_LOG_FLUSH_SECONDS)
        while self._queue or self._spilled:
            if self._spilled and len(self._queue) <= settings.EZAT_USAGE_LOG_MEMORY_RECORDS // 2:
                await self._reload()
                if not self._queue:
                    break  # unreadable segments (logged): replayed by the next start
            batch = self._queue[: self._max_batch]
            records, log_rows = _split(batch)
            try:
                await self._store.store_batch(records, log_rows)
            except Exception as exc:  # noqa: BLE001 - logged; the records stay in the log
                FLUSH_FAILURES.inc()
                self._backoff = min(max(self._backoff * 2, 0.05), 2.0)
                logger.warning(
                    "usage log: the database did not take a batch (%r); retry in %.2f s",
                    exc,
                    self._backoff,
                    extra={"records": len(records)},
                )
                await asyncio.sleep(self._backoff)
                continue
            self._backoff = 0.0
            FLUSHED.inc(len(batch))
            self.batch_sizes = [*self.batch_sizes[-99:], len(batch)]
            await self._settle([r[SETTLE_FIELD] for r, _ in batch if SETTLE_FIELD in r])
            # Out of the queue once stored and settled (a stop in between stores and settles
            # them again, idempotently): `unflushed` is what the limiter still holds as holds.
            del self._queue[: len(batch)]
            UNFLUSHED.set(self.unflushed)
            for _, path in batch:
                self._segments[path].stored += 1
            await self._retire()

    async def _reload(self) -> None:
        """Read spilled records back from their segments, oldest first, until the queue is
        full again. Each comes from its segment's index `queued` on: the records after the
        ones the queue had, in the order they were logged."""
        room = settings.EZAT_USAGE_LOG_MEMORY_RECORDS - len(self._queue)
        for path, segment in list(self._segments.items()):
            if room <= 0:
                break
            if not segment.spilled:
                continue
            take = min(segment.spilled, room)
            try:
                records, _ = await asyncio.to_thread(read_records, path)
            except OSError:
                records = []
            chunk = records[segment.queued : segment.queued + take]
            if len(chunk) < take:
                # Cannot happen short of the file being damaged: the segment is never deleted
                # (its records are not all stored), so the next start's replay takes it.
                logger.error(
                    "usage log: spilled records missing from their segment; left to the replay",
                    extra={"file": path.name, "expected": take, "found": len(chunk)},
                )
                self._spilled -= segment.spilled
                segment.spilled = 0
                continue
            self._queue.extend((record, path) for record in chunk)
            segment.queued += take
            segment.spilled -= take
            self._spilled -= take
            room -= take

    async def _settle(self, settles: list[dict[str, Any]]) -> None:
        settler = _settler
        if settler is None:
            return
        try:
            await settler(settles)
        except Exception:  # the rows are stored; the holds lapse by their TTL
            logger.exception("usage log: settling stored records failed")

    async def _retire(self) -> None:
        """Close the current segment when it is full or old, and delete every closed segment
        whose records are all stored (after a crash, only the rest is replayed)."""
        current = self.file.current
        segment = self._segments.get(current) if current is not None else None
        if segment is not None and (
            segment.logged >= settings.EZAT_USAGE_LOG_SEGMENT_RECORDS
            or time.monotonic() - segment.opened >= settings.EZAT_USAGE_LOG_SEGMENT_SECONDS
        ):
            detached = await self.file.detach()
            if detached is not None:
                self._segments.setdefault(detached[1], _Segment()).fd = detached[0]
        for path, seg in list(self._segments.items()):
            if seg.fd is not None and seg.stored >= seg.logged:
                path.unlink(missing_ok=True)  # a crash before this: replayed, idempotently
                os.close(seg.fd)  # releases the lock
                del self._segments[path]

    async def stop(self) -> None:
        """Stop the flusher (shutdown, after `wait_flushed` timed out)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher

    def close(self) -> None:
        """Release the files and the database connections (tests, shutdown). Records not
        stored stay in their segments, replayed by the next start."""
        self.file.close()
        for seg in self._segments.values():
            if seg.fd is not None:
                os.close(seg.fd)
        self._segments.clear()
        self._queue.clear()
        self._spilled = 0
        self._store.close()


def _split(
    batch: list[tuple[dict[str, Any], Path]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the usage rows, the request-log rows) of a batch, as copies the inserts may change (a
    reused request id is suffixed, a log row cleaned) without their stored form."""
    records: list[dict[str, Any]] = []
    log_rows: list[dict[str, Any]] = []
    for record, _ in batch:
        row = dict(record)
        if row.pop(KIND_FIELD, None) == REQUEST_LOG_KIND:
            log_rows.append(row)
        else:
            row.pop(SETTLE_FIELD, None)
            records.append(row)
    return records, log_rows


usage_log = UsageLog()


async def record(data: UsageData, limits_id: str) -> tuple[int, bool]:
    """Record a request's usage before its answer ends: (its cost, whether it is unflushed).

    With EZAT_USAGE_COMMIT=group the row goes to the log (unflushed: the caller then calls the
    limiter's `hold_unflushed`, not `settle`); when the log cannot take it (disk full), or with
    `direct`, through the usage writer (the database, else the spool): settled as always.
    """
    if not enabled():
        return await record_usage(data), False
    fields = record_fields(data)
    cost = int(fields["cost_nano"])
    settle = {
        "limits_id": limits_id,
        "key_id": data.key_id,
        "org_id": data.org_id,
        "cost_nano": cost,
    }
    try:
        await usage_log.commit(fields, settle)
    except SpoolError:
        logger.exception("usage log write failed; recording through the database")
        return await record_usage(data), False
    return cost, True
