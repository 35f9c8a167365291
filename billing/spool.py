"""The durable local spool for usage records the database would not take.

Why a local file and not a Redis stream: the spool exists for the moment a store is down, and
the embedded default has no Redis at all; a Redis stream would also put a second networked store
(that can be down, or evicting, or running without AOF fsync) between an answered request and
its bill. A file on the gateway's own disk is there whenever the process is, and `fsync` is a
guarantee the process can check for itself. The cost is that a spool is replayed by a process on
the same host: a replacement process starts on the same volume (`EZAT_USAGE_SPOOL_DIR`, a
persistent volume in a container deployment).

The shape:

- One append-only file per process (`usage-<host>-<pid>-<token>.jsonl`), opened only on the
  first failure: the hot path never touches the disk. The writer holds an exclusive `flock` on
  it for as long as it is open, which is how any other process tells a live file from one whose
  writer is gone (a crash releases the lock).
- Group fsync: records appended while an fsync is in flight go in the next write and share its
  fsync; every caller awaits its own record's fsync, so an answer that went out has its bill on
  disk.
- Each line is `<crc32 hex> <json>\\n`. A crash mid-write leaves a torn last line: its checksum
  (or newline) is missing, so it is skipped and counted (`ezat_usage_spool_torn_lines_total`).
  Its request was never answered (the caller was still awaiting the fsync), so nothing billable
  is lost.
- Replay (at start and by the retry loop, gateway/durability.py): every file whose lock can be
  taken is inserted record by record through `billing.recorder.insert_idempotent` and deleted.
  Idempotent by request id (with the same org and start time): a record replayed twice, or one
  whose first INSERT committed but whose answer was lost, is stored once. A caller that reused
  its own x-request-id still gets its second request stored under a suffixed id.
- A record the database refuses for a reason other than being unreachable (a bug, bad data) goes
  to `rejected-*.jsonl` beside the spool and is counted, instead of blocking the replay forever.
- Files live in a folder per database (`EZAT_USAGE_SPOOL_DIR/db-<digest>/`, billing/spool_owner.py):
  a process replays only its own database's folder, and leaves another database's spool where
  it is, counted (`ezat_usage_spool_foreign_files`) and named in a warning. Replayed into the
  wrong database, its records would be refused, moved aside and never billed.

When the spool itself cannot take a record (disk full, directory unwritable or gone, a file-size
limit) while the database is down, the record is kept in the writer's memory
(billing/recorder.py: `ezat_usage_held_in_memory`, retried into the database or the spool every
EZAT_USAGE_SPOOL_RETRY_SECONDS), and while any record is held, new billable requests are refused
with a 503 (`x-should-retry: true`) before any upstream work. Why both, and not one of them:

- A 503 alone cannot cover the requests already in flight: the upstream has done their work and
  the client may have received it by the time their record fails. Failing them (a 500) would
  lose a bill that is owed and tell the client nothing useful; holding the record keeps the bill.
- Holding alone would let memory (and the amount at risk if this process also dies) grow with
  traffic for as long as both stores are down. Refusing new work before it starts bounds the
  held records to the requests that were in flight when both stores failed, and nothing new is
  served that could not be billed. Whether the spool "can accept" is known without any I/O on
  the request path: it is exactly "records are being held".
- A probe of the disk at admission would cost every request a system call and could still be
  wrong a moment later; the held-records signal is free and is never wrong about the past.

The one window left is a process that dies while holding records: those (at most the requests in
flight when both stores failed) are lost, and are logged with their content at the failure.
After a failed write the spool file is closed (a torn line may end it, skipped at replay) and the
next write opens a new one, so a torn tail never merges with a later complete line.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from prometheus_client import Counter, Gauge

from billing.spool_owner import (
    FOLDER_PREFIX,
    current_identity,
    describe_folder,
    write_description,
)

logger = logging.getLogger(__name__)

SPOOLED = Counter("ezat_usage_spooled_total", "Usage records written to the local spool")
SPOOL_FSYNCS = Counter("ezat_usage_spool_fsyncs_total", "fsyncs of the usage spool (one a batch)")
REPLAYED = Counter(
    "ezat_usage_spool_replayed_total", "Spooled usage records replayed into the database"
)
TORN_LINES = Counter(
    "ezat_usage_spool_torn_lines_total",
    "Spool lines skipped at replay because they were torn (a crash mid-write) or corrupt",
)
REJECTED = Counter(
    "ezat_usage_spool_rejected_total",
    "Spooled records the database refused (not for being down); kept in rejected-*.jsonl",
)
PENDING_FILES = Gauge("ezat_usage_spool_files", "Spool files seen at the last replay")
FOREIGN_FILES = Gauge(
    "ezat_usage_spool_foreign_files",
    "Spool files of another database (or of unknown database) in EZAT_USAGE_SPOOL_DIR, left "
    "unreplayed by this process",
)

PREFIX = "usage-"
# The group-commit log's segments (billing/usage_log.py): same format, folder and lock rule.
LOG_PREFIX = "log-"
SUFFIX = ".jsonl"
# A log record's limiter settlement (billing/usage_log.py), stripped before the INSERT.
SETTLE_FIELD = "_settle"
# A log record that is a request-log row (billing/request_log.py), not a usage row: its kind.
KIND_FIELD = "_kind"
REQUEST_LOG_KIND = "request_log"


class SpoolError(Exception):
    """The spool could not make a record durable (disk full, directory not writable)."""


def spool_root() -> Path:
    return Path(settings.EZAT_USAGE_SPOOL_DIR)


def spool_dir() -> Path:
    """This process's folder: the one of the database it is configured for."""
    return spool_root() / current_identity().folder


# --- encoding ---------------------------------------------------------------------------------
def encode(fields: dict[str, Any]) -> bytes:
    """One spool line: checksum, space, JSON (datetimes as RFC 3339 with microseconds), newline."""
    payload = orjson.dumps(fields)
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode(line: bytes) -> dict[str, Any] | None:
    """The record of one complete line, or None when it is torn or corrupt."""
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        fields = orjson.loads(payload)
    except ValueError:
        return None
    if not isinstance(fields, dict) or "request_id" not in fields:
        return None
    fields["started_at"] = datetime.fromisoformat(fields["started_at"])
    if isinstance(fields.get("created_at"), str):
        fields["created_at"] = datetime.fromisoformat(fields["created_at"])
    return fields


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(the records of the file's complete lines, how many lines were torn or corrupt)."""
    records: list[dict[str, Any]] = []
    torn = 0
    with path.open("rb") as f:
        for line in f:
            fields = decode(line)
            if fields is None:
                torn += 1
            else:
                records.append(fields)
    return records, torn


# --- the writer side --------------------------------------------------------------------------
class UsageSpool:
    """The process's spool file, written in fsynced batches from the event loop."""

    prefix = PREFIX

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._fd: int | None = None
        self._path: Path | None = None
        self._pending: list[tuple[bytes, asyncio.Future[Path]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.fsyncs = 0  # for tests: batching is visible as fewer fsyncs than records
        self.appended = 0

    @property
    def directory(self) -> Path:
        return self._directory or spool_dir()

    @property
    def current(self) -> Path | None:
        """The file this process appends to now (None until the first failure or a rotation)."""
        return self._path

    async def append(self, records: list[dict[str, Any]]) -> Path:
        """Returns once every record is on disk (fsynced), with the file they are in (one
        file: they go in one write); raises SpoolError otherwise."""
        futures = [self.submit(fields) for fields in records]
        paths = await asyncio.shield(asyncio.gather(*futures))
        return paths[-1]

    def submit(self, fields: dict[str, Any]) -> asyncio.Future[Path]:
        """Queue one record; the future resolves with its file once it is fsync'd (or fails
        with SpoolError)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Path] = loop.create_future()
        self._pending.append((encode(fields), future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await loop.run_in_executor(None, self._write, b"".join(line for line, _ in batch))
            except OSError as exc:
                logger.exception("usage spool write failed", extra={"records": len(batch)})
                error = SpoolError(f"usage spool write failed: {exc}")
                # A partial write may have left a torn line: later records go to a new file.
                self.close()
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            path = self._path
            assert path is not None  # set by _open in _write; only the loop closes it
            self._count(len(batch), path)
            for _, future in batch:
                if not future.done():
                    future.set_result(path)

    def _count(self, records: int, path: Path) -> None:
        SPOOLED.inc(records)
        self.appended += records

    def _write(self, data: bytes) -> None:
        fd = self._open()
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        self.fsyncs += 1
        self._count_fsync()

    def _count_fsync(self) -> None:
        SPOOL_FSYNCS.inc()

    def _open(self) -> int:
        if self._fd is None:
            directory = self.directory
            directory.mkdir(parents=True, exist_ok=True)
            if self._directory is None:
                write_description(directory, current_identity())
            name = (
                f"{self.prefix}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SUFFIX}"
            )
            path = directory / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else can hold it
            _fsync_dir(directory)  # the file's name survives a crash too
            self._fd, self._path = fd, path
        return self._fd

    async def rotate(self) -> Path | None:
        """Close the current file (releasing its lock) so a replay can take it; the next
        failure opens a new one. Waits for a flush in flight. Returns the closed file."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        return self.close()

    def close(self) -> Path | None:
        fd, path = self._fd, self._path
        self._fd = self._path = None
        if fd is not None:
            os.close(fd)  # releases the flock
        return path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the replay side (synchronous: runs on a worker thread with the ORM) ----------------------
@dataclass(slots=True)
class ReplayResult:
    files: int = 0
    replayed: int = 0
    torn: int = 0
    rejected: int = 0
    busy: int = 0  # files still held by a live writer
    foreign: int = 0  # files of another database, left alone (default folder only)
    request_log: int = 0  # request-log rows of the group-commit log stored by this replay
    # The limiter settlements of the group-commit log's records stored by this replay (their
    # process died before settling them): the caller settles them (gateway/durability.py).
    settles: list[dict[str, Any]] = field(default_factory=list)


def replay(directory: Path | None = None) -> ReplayResult:
    """Insert every record of every spool file no live process holds, then delete the file.

    Without `directory`, the folder of this process's database, and the other databases'
    spool files in EZAT_USAGE_SPOOL_DIR are counted and named, never touched.

    Raises the database's OperationalError/InterfaceError when it is still unreachable: the
    file stays, and the next round takes it up again (records already inserted are found by
    the idempotent insert, never doubled).
    """
    if directory is None:
        own = spool_dir()
        result = _replay(own)
        result.foreign = _note_foreign(spool_root(), own)
        return result
    return _replay(directory)


def _replay(directory: Path) -> ReplayResult:
    from django.db import DatabaseError, InterfaceError, OperationalError

    # Lazy: the recorder (and the usage log) build on this spool, so importing them at the top
    # would be a circle (tests/foundation/test_import_cycles.py, ALLOWED).
    from billing.recorder import insert_idempotent

    result = ReplayResult()
    if not directory.is_dir():
        PENDING_FILES.set(0)
        return result
    paths = sorted(
        [*directory.glob(f"{PREFIX}*{SUFFIX}"), *directory.glob(f"{LOG_PREFIX}*{SUFFIX}")]
    )
    PENDING_FILES.set(len(paths))
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # replayed by another process just now
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                result.busy += 1  # its writer is alive and may still append
                continue
            if os.fstat(fd).st_nlink == 0:
                continue  # another replayer finished it between our open and our lock
            records, torn = read_records(path)
            if torn:
                TORN_LINES.inc(torn)
                logger.warning("usage spool: torn lines skipped", extra={"file": path.name})
            for fields in records:
                if fields.pop(KIND_FIELD, None) == REQUEST_LOG_KIND:
                    result.request_log += _replay_request_log(fields)
                    continue
                settle = fields.pop(SETTLE_FIELD, None)
                try:
                    insert_idempotent(dict(fields))
                except (OperationalError, InterfaceError):
                    raise
                except DatabaseError:
                    logger.exception("usage spool: record refused", extra={"file": path.name})
                    _reject(directory, fields)
                    result.rejected += 1
                    REJECTED.inc()
                    continue
                result.replayed += 1
                REPLAYED.inc()
                if settle is not None:
                    result.settles.append(settle)
            result.torn += torn
            result.files += 1
            path.unlink()
        finally:
            os.close(fd)
    return result


def _replay_request_log(fields: dict[str, Any]) -> int:
    """Store one request-log row of a dead process's log (idempotent: ON CONFLICT DO NOTHING,
    so a row its flusher stored already is not stored twice); a row the database refuses goes to
    the quarantine. Raises when the database is unreachable (the file stays)."""
    from django.db import InterfaceError, OperationalError

    from billing import request_log
    from billing import request_log_quarantine as quarantine

    try:
        request_log.insert_rows([request_log.db_row(fields)])
    except (OperationalError, InterfaceError):
        raise
    except quarantine.INSERT_ERRORS as exc:
        quarantine.keep(fields, exc)
        return 0
    return 1


# What the last round warned about: the warning is repeated only when it changes, not every
# EZAT_USAGE_SPOOL_RETRY_SECONDS.
_warned: dict[Path, int] = {}


def foreign_files(root: Path, own: Path) -> dict[Path, int]:
    """Spool files in `root` outside `own`: {folder: files}. `root` itself holds the files of
    gateways from before per-database folders, whose database is unknown."""
    found: dict[Path, int] = {}
    if not root.is_dir():
        return found
    legacy = len(list(root.glob(f"{PREFIX}*{SUFFIX}")))  # the log came after the folders
    if legacy:
        found[root] = legacy
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        if folder == own or not folder.is_dir():
            continue
        count = len(list(folder.glob(f"{PREFIX}*{SUFFIX}"))) + len(
            list(folder.glob(f"{LOG_PREFIX}*{SUFFIX}"))
        )
        if count:
            found[folder] = count
    return found


def _note_foreign(root: Path, own: Path) -> int:
    found = foreign_files(root, own)
    total = sum(found.values())
    FOREIGN_FILES.set(total)
    if found == _warned:
        return total
    _warned.clear()
    _warned.update(found)
    mine = current_identity().describe()
    for folder, count in sorted(found.items()):
        if folder == root:
            logger.warning(
                "usage spool: %d file(s) in %s are from before per-database spool folders; "
                "their database is unknown, so this gateway (database: %s) does not replay "
                "them. Move them into %s/ if they belong to this database.",
                count,
                folder,
                mine,
                own,
            )
        else:
            logger.warning(
                "usage spool: %d file(s) in %s belong to another database (%s) and are not "
                "replayed by this gateway (database: %s); a gateway configured for that "
                "database replays them",
                count,
                folder,
                describe_folder(folder),
                mine,
            )
    return total


def _reject(directory: Path, fields: dict[str, Any]) -> None:
    path = directory / f"rejected-{socket.gethostname()}-{os.getpid()}{SUFFIX}"
    with path.open("ab") as f:
        f.write(encode(fields))
        f.flush()
        os.fsync(f.fileno())


spool = UsageSpool()
