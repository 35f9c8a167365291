"""A minimal pipelined Redis client for the limiter's hot path: EVALSHA of its own scripts.

Why not redis-py here: every request makes two limiter calls (admission, settlement), and
redis-py's asyncio path (command packing in Python, a pooled connection checked out and back
under an asyncio.Condition, a timeout context per call) cost ~90 µs of CPU per call on the
benchmark machine against ~30 µs for this client. A burst of 1,000 streams also made redis-py
open hundreds of pooled connections; here every call of a process shares one connection,
pipelined (Redis answers in order), so a burst costs one socket and few system calls.

Commands are coalesced (issue 35 item 2): the commands queued within one event-loop turn (the
admissions and settlements of every request the loop is serving at that moment) leave in ONE
write at the end of the turn, and Redis reads them in one read and answers them in one write;
the replies resolve their callers in order. At C=1 that is still one write per command.

Scope, deliberately small: RESP2 over TCP (`redis://` URLs with optional user, password and
db). Anything else (`rediss://`, unix sockets) keeps redis-py (see `RespClient.supports`). The
errors raised are redis-py's (ConnectionError, TimeoutError, ResponseError), so the limiter's
failure policy is the same on both clients.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import hiredis
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


@dataclass(frozen=True, slots=True)
class ScriptRef:
    sha: str
    source: str


def pack(*parts: bytes | str | int) -> bytes:
    """One RESP2 command (an array of bulk strings), packed by hiredis in C: an admission's
    ~40 arguments cost ~3× less than formatting them in Python (issue 22's profile). hiredis
    takes str, int, float and bytes only; anything else (a bool, None) is packed as `str()`
    writes it, as before, so no caller sees a different command."""
    try:
        return hiredis.pack_command(parts)
    except TypeError:
        return _pack_any(parts)


def _pack_any(parts: tuple[object, ...]) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class WriteCounter:
    """Transport writes made (tests and the benchmark count them against commands sent)."""

    writes = 0


class _Protocol(asyncio.Protocol):
    """One connection: replies resolve the oldest waiting future (RESP is in order)."""

    def __init__(self, counter: WriteCounter | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.counter = counter
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.reader = hiredis.Reader(encoding="utf-8")
        self.lost: BaseException | None = None
        # Commands queued in this loop turn, written together by flush() (scheduled once).
        self.pending: list[bytes] = []
        self.flush_scheduled = False

    def queue(self, command: bytes, loop: asyncio.AbstractEventLoop) -> None:
        self.pending.append(command)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        pending, self.pending = self.pending, []
        if not pending or self.lost is not None or self.transport is None:
            return  # lost meanwhile: fail() has failed every waiter of these commands
        self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        if self.counter is not None:
            self.counter.writes += 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            while (reply := self.reader.gets()) is not False:
                waiter = self.waiters.popleft()
                if waiter.done():
                    continue  # its caller timed out; the reply still had to be consumed
                if isinstance(reply, hiredis.ReplyError):
                    waiter.set_exception(_reply_error(str(reply)))
                else:
                    waiter.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:
            # Out of step with the server: nothing on this connection can be trusted.
            self.abort(RedisConnectionError(f"redis protocol error: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to redis lost: {exc or 'closed'}"))

    def fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        self.pending.clear()
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)

    def abort(self, exc: BaseException) -> None:
        self.fail(exc)
        if self.transport is not None:
            self.transport.abort()


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


class RespClient(WriteCounter):
    """Pipelined calls over one lazily opened connection, bound to the running event loop."""

    def __init__(
        self, url: str, *, socket_timeout: float, connect_timeout: float, coalesce: bool = True
    ) -> None:
        options = parse_url(url)
        self._host = str(options.get("host") or "127.0.0.1")
        self._port = int(options.get("port") or 6379)
        self._db = int(options.get("db") or 0)
        self._username = options.get("username")
        self._password = options.get("password")
        self._timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._conn: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        # False: every command is written on its own at once (the benchmark's "before").
        self.coalesce = coalesce
        self.commands_sent = 0  # for tests: round trips per operation
        self.connections_opened = 0

    @staticmethod
    def supports(url: str) -> bool:
        return urlsplit(url).scheme == "redis"

    async def evalsha(self, script: ScriptRef, keys: list[str], args: list[Any]) -> Any:
        command = pack(b"EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return await self.call(command)
        except NoScriptError:
            # Redis restarted or its scripts were flushed: load once, then the same call.
            await self.call(pack(b"SCRIPT", b"LOAD", script.source))
            return await self.call(command)

    async def call(self, command: bytes) -> Any:
        conn = self._conn
        if conn is None or conn.lost is not None:
            conn = await self._connect()
        return await self._send(conn, command)

    def _send(self, conn: _Protocol, command: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        conn.waiters.append(waiter)
        assert conn.transport is not None
        if self.coalesce:
            conn.queue(command, loop)
        else:
            conn.transport.write(command)
            self.writes += 1
        self.commands_sent += 1
        timer = loop.call_later(self._timeout, _expire, conn, waiter, self._timeout)
        waiter.add_done_callback(lambda _: timer.cancel())
        return waiter

    async def _connect(self) -> _Protocol:
        # Concurrent callers share one connection attempt.
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done() and self._connecting is connecting:
                self._connecting = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Protocol(self), self._host, self._port
                )
            self.connections_opened += 1
        except TimeoutError as exc:
            raise RedisTimeoutError("timed out connecting to redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"cannot connect to redis: {exc}") from exc
        setup: list[bytes] = []
        if self._password is not None:
            auth = (self._username, self._password) if self._username else (self._password,)
            setup.append(pack(b"AUTH", *auth))
        if self._db:
            setup.append(pack(b"SELECT", self._db))
        # Written before the connection is shared, so every later command runs after them.
        pending = [self._send(conn, command) for command in setup]
        try:
            for waiter in pending:
                await waiter
        except BaseException:
            conn.abort(RedisConnectionError("redis connection setup failed"))
            raise
        self._conn = conn
        return conn

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None:
            conn.transport.close()
            conn.fail(RedisConnectionError("client closed"))


def _expire(conn: _Protocol, waiter: asyncio.Future[Any], seconds: float) -> None:
    if not waiter.done():
        # Replies arrive in order, so a late one would answer the wrong caller: the connection
        # is dropped (every call pending on it fails) and the next call opens a new one.
        conn.abort(RedisTimeoutError(f"no reply from redis within {seconds:g} s"))
