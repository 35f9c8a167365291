"""Minimal ASGI request/response plumbing for the API paths (no Django request machinery)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import GatewayError
from gateway.sizes import format_size

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
JSON_CT = (b"content-type", b"application/json")
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Tells nginx-style proxies not to buffer the stream (keep-alives must reach the client).
    (b"x-accel-buffering", b"no"),
]


class ApiRequest:
    __slots__ = (
        "_disconnected",
        "_watcher",
        "body",
        "headers",
        "key",
        "method",
        "path",
        "peer",
        "query",
        "receive",
        "request_id",
    )

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query: bytes = scope.get("query_string") or b""
        client = scope.get("client")
        self.peer: str | None = client[0] if client else None  # the TCP peer (None: a socket)
        self.receive = receive
        self.headers: dict[str, str] = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
        }
        supplied = self.headers.get("x-request-id", "")
        self.request_id = (
            supplied
            if supplied and REQUEST_ID_RE.fullmatch(supplied)
            else f"req_{uuid.uuid4().hex}"
        )
        self.body = b""
        self.key: Any = None  # the caller's KeyInfo once authenticated (the request log's org)
        self._disconnected = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    async def read_body(self, max_bytes: int) -> bytes:
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise _too_large(max_bytes)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._disconnected.set()
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        self.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self.body

    def watch_disconnect(self) -> asyncio.Event:
        """Start noticing a client that goes away (needed for streams: billing what was sent)."""
        if self._watcher is None and not self._disconnected.is_set():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self._disconnected

    async def _watch(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._disconnected.set()
                return

    @property
    def disconnected(self) -> bool:
        return self._disconnected.is_set()

    def close(self) -> None:
        """End of the request. The cancelled watcher's traceback refers back to this object, a
        cycle only the cycle collector frees: drop our side of it and the (possibly 32 MB) body
        now, so memory stays flat between collections."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
        self.body = b""

    def bearer_or_api_key(self) -> str | None:
        key = self.headers.get("x-api-key")
        if key:
            return key.strip()
        auth = self.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return None


def _too_large(max_bytes: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body is larger than {format_size(max_bytes)}",
        type_="request_too_large",
    )


def base_headers(request_id: str) -> Headers:
    rid = request_id.encode()
    return [(b"x-request-id", rid), (b"request-id", rid)]


async def send_response(send: Send, status: int, body: bytes, headers: Headers) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class StreamWriter:
    """An SSE response that may be opened early (keep-alives) before its first data event."""

    __slots__ = ("_send", "closed", "headers", "opened")

    def __init__(self, send: Send, headers: Headers) -> None:
        self._send = send
        self.headers = headers
        self.opened = False
        self.closed = False

    async def open(self) -> None:
        if not self.opened:
            self.opened = True
            await self._send(
                {"type": "http.response.start", "status": 200, "headers": self.headers}
            )

    async def write(self, data: bytes) -> None:
        if not self.opened:
            await self.open()
        if data:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.opened:
                await self.open()
            await self._send({"type": "http.response.body", "body": b""})
