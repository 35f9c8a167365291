"""The provider HTTP client: HTTP/1.1 keep-alive connections per process, on asyncio + httptools.

Why not a general-purpose client: the gateway makes exactly one kind of call (a POST with a
JSON body; a JSON or SSE answer) and it is the largest single cost on the hot path. Measured on
the benchmark machine (docs/design.md and bench/): httpx's async client cost 1.1–1.9 ms of CPU per
proxied request, aiohttp's 0.13–0.27 ms, and for a streamed answer aiohttp's StreamReader
machinery took ~20 % of the gateway's CPU per event. This client writes the request in one
call, parses with httptools (C), and hands body chunks to the reader as they arrive.

What it deliberately does not do: redirects, proxies from the environment, cookies, content
decoding (it asks for `identity`), HTTP/2. TLS is the standard library's default context.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools
from django.conf import settings

from catalog.snapshot import DeploymentInfo, Route
from gateway.first_tokens import gate
from gateway.providers import ProviderCall, provider

# An idle pooled connection older than this is not reused: servers close idle keep-alive
# connections (often after 60 s), and a request written into one that is closing fails.
KEEPALIVE_SECONDS = 30.0
# Above this much unread body, reading from the socket pauses until the caller catches up.
HIGH_WATER = 1024 * 1024


class UpstreamDisconnected(ConnectionError):
    """The provider closed the connection or sent something that is not HTTP/1.1."""


_Origin = tuple[str, str, int]  # scheme, host, port
_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class _Target:
    """What a deployment's base URL means for a request: where to connect, and how to address."""

    origin: _Origin
    path_prefix: str
    host_header: str


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time. Also the response's body reader."""

    def __init__(self, origin: _Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.broken: BaseException | None = None
        self.loop = asyncio.get_running_loop()
        self.idle_timer: asyncio.TimerHandle | None = None
        self.idle_limit = 0.0
        self.last_data = 0.0
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done: asyncio.Future[None] | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        # Waiting for the first token (gateway/first_tokens.py): a wake-up is then counted, and
        # uncounted when the reader runs.
        self.awaiting_first = False
        self.counted = False

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamDisconnected(f"invalid HTTP from the provider: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.complete:
            reason = f": {exc}" if exc else ""
            self._fail(UpstreamDisconnected(f"the provider closed the connection{reason}"))

    # -- httptools callbacks ---------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.idle_timer is not None:
            self.last_data = self.loop.time()
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        # Asked now: once this callback returns, httptools has reset and answers False.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True
        self._wake()

    # -- silence detection ------------------------------------------------------------------------
    def watch_idle(self, seconds: float) -> None:
        self.stop_watching()
        self.idle_limit = seconds
        self.last_data = self.loop.time()
        self.idle_timer = self.loop.call_at(self.last_data + seconds, self._check_idle)

    def stop_watching(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _check_idle(self) -> None:
        # One timer per response, re-armed once per silence interval: a timer per read (what
        # asyncio.timeout around each read costs) was ~5 % of a paced stream's CPU.
        now = self.loop.time()
        due = self.last_data + self.idle_limit
        if now >= due:
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(TimeoutError())
            self.last_data = now
            due = now + self.idle_limit
        self.idle_timer = self.loop.call_at(due, self._check_idle)

    # -- internals -------------------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            if self.awaiting_first and not self.counted:
                self.counted = True
                gate.arrived()

    def _fail(self, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = exc
        for future in (self.headers_done, self.waiter):
            if future is not None and not future.done():
                future.set_exception(exc)

    def abort(self) -> None:
        self.stop_watching()
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        if self.broken is None:
            self.broken = UpstreamDisconnected("connection closed by the gateway")

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and self.broken is None
            and self.transport is not None
            and not self.transport.is_closing()
            and self.keep_alive
        )


class UpstreamResponse:
    """Status and headers of a provider response; the body is read with `read` / `readany`."""

    __slots__ = ("_client", "_conn", "_released", "headers", "state", "status")

    def __init__(self, client: UpstreamClient, conn: _Connection, state: object = None) -> None:
        self._client = client
        self._conn = conn
        self._released = False
        self.status = conn.status
        self.headers = conn.headers
        # The provider's context for this call's decoder and reply reader (ProviderRequest).
        self.state = state

    async def readany(self) -> bytes:
        """The body received so far and not yet read; b"" once it has all been read."""
        if self._released:
            return b""  # the connection may already serve another request
        conn = self._conn
        while True:
            if conn.chunks:
                data = conn.chunks[0] if len(conn.chunks) == 1 else b"".join(conn.chunks)
                conn.chunks.clear()
                conn.buffered = 0
                if conn.paused and conn.transport is not None:
                    conn.paused = False
                    conn.transport.resume_reading()
                return data
            if conn.complete:
                return b""
            if conn.broken is not None:
                raise conn.broken
            conn.waiter = asyncio.get_running_loop().create_future()
            try:
                await conn.waiter
            finally:
                conn.waiter = None
                if conn.counted:
                    conn.counted = False
                    gate.taken()

    def watch_idle(self, seconds: float) -> None:
        """From now on, a `readany` that has waited `seconds` since the last body bytes raises
        TimeoutError (once per silent interval); the caller may keep reading after it."""
        self._conn.watch_idle(seconds)

    def stop_watching(self) -> None:
        self._conn.stop_watching()

    def awaiting_first_token(self, waiting: bool) -> None:
        """Whether the reader waits for its first token: then its wake-ups go first (see
        gateway/first_tokens.py)."""
        self._conn.awaiting_first = waiting

    async def read(self) -> bytes:
        """The whole body; the connection is released once it has been read."""
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        self.close()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        """Done with the response: a fully read keep-alive connection goes back to the pool,
        anything else is closed (an unread body must not reach the next request)."""
        if self._released:
            return
        self._released = True
        self._client.release(self._conn)


class UnusableDeployment(ValueError):
    """A deployment's stored base URL cannot be called (saved before validation existed, or
    written to the database directly): an attempt failure of that deployment, never a 500."""


class UpstreamClient:
    def __init__(self) -> None:
        # Per origin, oldest first: reuse takes the newest (warmest), expiry drops the oldest.
        self._idle: dict[_Origin, collections.deque[_Connection]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None
        self._targets: dict[str, _Target] = {}

    def _target(self, base_url: str) -> _Target:
        target = self._targets.get(base_url)
        if target is None:
            parts = urlsplit(base_url)
            scheme = parts.scheme or "https"
            if scheme not in ("http", "https"):
                raise UnusableDeployment(f"unsupported provider URL scheme {scheme!r}")
            host = parts.hostname or ""
            if not host:
                raise UnusableDeployment("the provider URL has no host")
            port = parts.port or (443 if scheme == "https" else 80)
            default = (scheme, port) in (("https", 443), ("http", 80))
            literal = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed
            host_header = literal if default else f"{literal}:{port}"
            target = _Target((scheme, host, port), parts.path.rstrip("/"), host_header)
            self._targets[base_url] = target
        return target

    async def post(
        self,
        deployment: DeploymentInfo,
        path: str,
        body: bytes,
        beta: str | None = None,
        *,
        route: Route | None = None,
        tenant: tuple[int, str] | None = None,
    ) -> UpstreamResponse:
        target = self._target(deployment.base_url)
        # Built by tuple.__new__ (C), not by the NamedTuple's Python-level __new__: every attempt
        # builds one (bench.icount).
        fields = (deployment, target, path, body, beta, route, tenant)
        call = await provider(deployment.kind).prepare(_new_tuple(ProviderCall, fields))
        head = (
            f"POST {target.path_prefix}{call.path} HTTP/1.1\r\n"
            f"host: {target.host_header}\r\n"
            f"{call.headers}"
            "accept-encoding: identity\r\n"
            f"content-length: {len(call.body)}\r\n"
        )
        conn = await self._acquire(target.origin)
        loop = asyncio.get_running_loop()
        conn.headers_done = loop.create_future()
        try:
            assert conn.transport is not None
            conn.transport.writelines((head.encode("latin-1"), b"\r\n", call.body))
            await conn.headers_done
        except BaseException:
            # Cancelled (deadline, client gone) or failed: a late answer must not reach the
            # next request on this connection.
            conn.abort()
            raise
        return UpstreamResponse(self, conn, call.state)

    async def _acquire(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._idle.clear()  # connections belong to the loop that opened them (tests)
            self._loop = loop
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            fresh = now - conn.idle_since < KEEPALIVE_SECONDS
            if fresh and conn.transport is not None and not conn.transport.is_closing():
                conn.reset()
                return conn
            conn.abort()
        scheme, host, port = origin
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        async with asyncio.timeout(settings.EZAT_UPSTREAM_CONNECT_TIMEOUT):
            _, conn = await loop.create_connection(
                lambda: _Connection(origin),
                host,
                port,
                ssl=context,
                server_hostname=host if context else None,
            )
        return conn

    def release(self, conn: _Connection) -> None:
        conn.stop_watching()
        if not conn.reusable:
            conn.abort()
            return
        now = time.monotonic()
        conn.idle_since = now
        conn.headers_done = None
        pool = self._idle.setdefault(conn.origin, collections.deque())
        pool.append(conn)
        # After a burst, the connections it opened would otherwise sit here (sockets and all)
        # until reused: the expired ones go as later requests come back.
        while pool and now - pool[0].idle_since >= KEEPALIVE_SECONDS:
            pool.popleft().abort()

    async def close(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.abort()
        self._idle.clear()


client = UpstreamClient()

# What a failed attempt raises: refused/reset/unreachable, timeouts, a closed or garbled stream.
CONNECT_ERRORS = (OSError, asyncio.TimeoutError)
