"""Request-log rows the database refuses: set aside one by one, never with their batch.

The writer inserts request-log rows in batches (billing/recorder.py). One row the database
cannot store (a value too long for its column, a foreign key to an org deleted meanwhile,
anything PostgreSQL refuses) used to fail the whole INSERT, and every other row of the batch,
of every org in it, was dropped with it (issue 31). Now a refused batch is split in halves
until the refused rows stand alone (a few INSERTs for one bad row among hundreds; the INSERT is
ON CONFLICT DO NOTHING, so rows a failed half already stored are not written twice). Each
refused row is

- logged (an ERROR with its request id, org and the database's reason),
- counted (`ezat_request_log_quarantined_total{reason}`),
- appended as one JSON line to `EZAT_REQUEST_LOG_QUARANTINE_DIR/request-log.jsonl`,

and `manage.py replay_request_log_quarantine` inserts those lines once the cause is fixed
(idempotently: a line stored twice is one row), keeping the lines still refused.

A database that is *unreachable* is not a refusal: that batch is counted as dropped, as before
(the log is not the bill; usage records have their own spool).

Several processes append to one file: each line is one `write` under an exclusive `flock`. The
replay renames the file before reading it, and a writer that locked a file renamed under it
opens the new one, so no line is lost between the two.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.utils import timezone

logger = logging.getLogger(__name__)

FILE_NAME = "request-log.jsonl"
_REPLAYING = "request-log.replaying-"  # + pid + .jsonl: a file a replay took
_MAX_ERROR = 500


# What an INSERT of request-log rows raises: the database's and the driver's errors, and a
# value the driver could not adapt.
INSERT_ERRORS = (DatabaseError, InterfaceError, psycopg.Error, TypeError, ValueError)


def refused(exc: BaseException) -> bool:
    """Whether `exc` is the database (or the driver, adapting a value) refusing the data, as
    opposed to being unreachable: only then would the same rows fail again, one by one."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return False
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    return isinstance(exc, INSERT_ERRORS)


def reason(exc: BaseException) -> str:
    """A bounded metric label: the error's class (psycopg names one per SQLSTATE)."""
    return type(exc).__name__


def directory() -> Path:
    return Path(settings.EZAT_REQUEST_LOG_QUARANTINE_DIR)


def keep(fields: dict[str, Any], exc: BaseException) -> None:
    """Log, count and append one refused row. Synchronous on purpose: a few hundred bytes, rare,
    and the row must be on disk before the writer forgets it."""
    from billing.request_log import DROPPED, QUARANTINED

    label = reason(exc)
    QUARANTINED.labels(label).inc()
    logger.error(
        "request log row refused by the database; quarantined",
        extra={
            "request_id": fields.get("request_id"),
            "org_id": fields.get("org_id"),
            "reason": label,
            "error": str(exc)[:_MAX_ERROR],
            "quarantine": str(directory() / FILE_NAME),
        },
    )
    line = {
        "quarantined_at": timezone.now(),
        "reason": label,
        "error": str(exc)[:_MAX_ERROR],
        "row": fields,
    }
    try:
        append([line])
    except OSError:
        DROPPED.labels("quarantine_failed").inc()
        logger.exception("request log quarantine not writable; row lost", extra={"row": fields})


def append(lines: list[dict[str, Any]]) -> None:
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    data = b"".join(_dumps(line) + b"\n" for line in lines)
    path = folder / FILE_NAME
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                os.write(fd, data)
                os.fsync(fd)
                return
        finally:
            os.close(fd)  # closing releases the lock
        # A replay renamed the file between our open and our lock: append to the new one.


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str)


class ReplayRunning(Exception):
    """Another replay holds the quarantine: two would each put back the other's refusals."""


@contextmanager
def replay_lock() -> Iterator[None]:
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".replay.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReplayRunning(f"another replay of {folder} is running") from None
        yield
    finally:
        os.close(fd)


def take() -> list[Path]:
    """The files a replay reads: the live file renamed aside (writers start a new one), and any
    a replay that was interrupted left behind."""
    folder = directory()
    if not folder.is_dir():
        return []
    live = folder / FILE_NAME
    if live.exists():
        aside = folder / f"{_REPLAYING}{os.getpid()}-{timezone.now():%Y%m%dT%H%M%S%f}.jsonl"
        os.rename(live, aside)
        # Wait for a writer that locked the file before the rename to finish its line.
        fd = os.open(aside, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)
    return sorted(folder.glob(f"{_REPLAYING}*.jsonl"))


def read(path: Path) -> Iterator[dict[str, Any]]:
    for raw in path.read_bytes().splitlines():
        if raw.strip():
            yield orjson.loads(raw)


def row_of(line: dict[str, Any]) -> dict[str, Any]:
    """The row of a quarantine line, its times parsed back from the JSON text."""
    row = dict(line["row"])
    for column in ("started_at", "created_at"):
        if isinstance(row.get(column), str):
            row[column] = datetime.fromisoformat(row[column])
    return row
