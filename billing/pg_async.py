"""Usage rows on PostgreSQL written from the event loop itself.

The recorder's thread exists because Django's ORM is synchronous; the hot path does not use the
ORM (one prepared INSERT), so on PostgreSQL the batch goes out on an asyncio psycopg connection
and a request's record costs no hop to a thread and back (two cross-thread wake-ups and a GIL
hand-over per batch, which at one request at a time were most of the record's latency).
The rare paths (a request id collision, recovery) stay on the thread with the ORM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection


def _connect_kwargs() -> dict[str, Any]:
    params = dict(connection.get_connection_params())
    # Django's own cursor class and adapters are for its synchronous connections; the values
    # written here are adapted by _row (JSON wrapped, datetimes aware) and need neither.
    for name in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(name, None)
    if settings.DB_TRANSACTION_POOLING:
        # Behind PgBouncer in transaction mode a prepared statement lives on whichever server
        # session prepared it (psycopg would prepare any query run 5 times), and the pooler
        # refuses startup options: neither is used (set synchronous_commit on the role instead).
        params["prepare_threshold"] = None
        return params
    if not settings.EZAT_USAGE_SYNCHRONOUS_COMMIT:
        # This connection only: the commit returns before the WAL reaches the disk (~0.2–0.3 ms
        # less per request on the benchmark machine). See the setting's comment for the risk.
        params["options"] = f"{params.get('options', '')} -c synchronous_commit=off".strip()
    return params


def _prepare() -> bool | None:
    # One prepared INSERT per connection saves its parse and plan per request; None: psycopg's
    # own choice, which prepare_threshold=None turns off (DB_TRANSACTION_POOLING).
    return None if settings.DB_TRANSACTION_POOLING else True


class PipelineRefused(psycopg.DataError):
    """A multi-row batch failed while psycopg was leaving pipeline mode with its bookkeeping
    out of step ("pop from an empty deque", seen after a refused row under load): which row was
    refused is unknown, so the batch counts as refused and the caller splits it (single rows go
    without a pipeline and get the server's own answer; rows already stored are skipped)."""


class AsyncPgInserter:
    """One autocommit connection per event loop; reconnects once if it was lost."""

    def __init__(self) -> None:
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def insert(self, sql: str, rows: list[list[Any]]) -> None:
        for attempt in (1, 2):
            conn = await self._connection()
            try:
                async with conn.cursor() as cursor:
                    if len(rows) == 1:
                        await cursor.execute(sql, rows[0], prepare=_prepare())
                    else:
                        await cursor.executemany(sql, rows)
                return
            except psycopg.OperationalError as exc:
                refusal = exc.__context__
                if isinstance(refusal, psycopg.Error) and not isinstance(
                    refusal, psycopg.OperationalError
                ):
                    # executemany runs in pipeline mode, and psycopg reports a row the server
                    # refused (a foreign key, a value too long) as "cannot exit pipeline mode
                    # while busy", the refusal only as its context. The refusal is the answer:
                    # the caller must see a refused row, not a dead connection (retrying the
                    # same rows would fail again). The connection's pipeline state is unknown,
                    # so it is dropped.
                    self.close()
                    raise refusal from exc
                # A dead connection (server restart, network): a fresh one, then the same rows.
                # Nothing was committed if the statement failed, so a retry never doubles a row;
                # a commit whose answer was lost hits the unique request id instead.
                self.close()
                if attempt == 2:
                    raise
            except IndexError as exc:
                if len(rows) == 1:
                    raise
                self.close()
                raise PipelineRefused(f"the batch failed in pipeline mode ({exc})") from exc

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        if self._conn is not None and (self._loop is not loop or self._conn.closed):
            self.close()
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(**_connect_kwargs(), autocommit=True)
            self._loop = loop
        return self._conn

    def close(self) -> None:
        """Drop the connection without awaiting (it may belong to a loop that has ended)."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.pgconn.finish()
