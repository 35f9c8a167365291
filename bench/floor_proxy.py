"""The least a Python gateway costs on EZAT's server stack: the `floor` contender of the peers
comparison (`--peers floor`), issue 22's item 3.

What it does is what Portkey's gateway does for the benchmark's request, and nothing more: an
ASGI app with no framework, no auth, no limits, no billing, no logs. It maps an OpenAI chat
request to an Anthropic Messages body, forwards it over a pooled keep-alive connection (parsed
with httptools, as gateway/upstream.py does), and maps the answer back: the JSON reply, or each
text delta of a stream as a chat chunk, then `[DONE]`. It runs on uvicorn with EZAT's options
(uvloop, httptools, one worker), started by its plain command line: the cells it is measured in
are closed loops over at most 16 keep-alive connections, where EZAT's batched accept
(core/accept.py) has nothing to batch.

Its CPU per request is therefore a floor for any gateway written in Python on this server: EZAT
on top of it pays for authentication, admission, routing, failover, translation of every field,
billing and the request log. The report sets it beside Portkey's in the same run, so the
question "can a Python gateway cost half of Portkey's" is answered by a measurement.

Run: `python -m uvicorn bench.floor_proxy:app` with `FLOOR_UPSTREAM=http://127.0.0.1:PORT`.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any
from urllib.parse import urlsplit

import httptools
import orjson

UPSTREAM_MODEL = "claude-sonnet-5-5"
UPSTREAM_KEY = os.environ.get("FLOOR_UPSTREAM_KEY", "sk-bench-upstream")
CHUNK_HEAD = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":'
DONE = b"data: [DONE]\n\n"

Scope = dict[str, Any]


class _Upstream(asyncio.Protocol):
    """One keep-alive connection to the provider; one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.complete = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.complete = True
        self._wake()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self) -> bytes:
        """Body bytes received so far; b"" at the end."""
        while not self.chunks:
            if self.complete:
                return b""
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


class _Pool:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.idle: list[_Upstream] = []

    async def post(self, body: bytes) -> _Upstream:
        conn = None
        while self.idle:
            candidate = self.idle.pop()
            if candidate.transport is not None and not candidate.transport.is_closing():
                conn = candidate
                break
        if conn is None:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(_Upstream, self.host, self.port)
        conn.parser = httptools.HttpResponseParser(conn)
        conn.complete = False
        assert conn.transport is not None
        conn.transport.write(
            b"POST /v1/messages HTTP/1.1\r\nhost: %s:%d\r\nx-api-key: %s\r\n"
            b"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s"
            % (self.host.encode(), self.port, UPSTREAM_KEY.encode(), len(body), body)
        )
        return conn

    def release(self, conn: _Upstream) -> None:
        if conn.complete and conn.transport is not None:
            self.idle.append(conn)


_pool: _Pool | None = None


async def _body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _json(send: Any, status: int, payload: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def app(scope: Scope, receive: Any, send: Any) -> None:
    global _pool
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] == "GET":
        await _json(send, 200, b'{"ok":true}')
        return
    if _pool is None:
        _pool = _Pool(os.environ["FLOOR_UPSTREAM"])
    request = orjson.loads(await _body(receive))
    stream = bool(request.get("stream"))
    upstream_body = orjson.dumps(
        {
            "model": UPSTREAM_MODEL,
            "max_tokens": request.get("max_tokens") or 1024,
            "messages": request["messages"],
            "stream": stream,
        }
    )
    conn = await _pool.post(upstream_body)
    if stream:
        await _relay_stream(conn, send)
    else:
        reply = orjson.loads(b"".join([chunk async for chunk in _chunks(conn)]))
        text = "".join(b.get("text", "") for b in reply.get("content", []))
        usage = reply.get("usage", {})
        completion = {
            "id": reply.get("id"),
            "object": "chat.completion",
            "model": request.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage.get("input_tokens", 0),
                "completion_tokens": usage.get("output_tokens", 0),
            },
        }
        await _json(send, 200, orjson.dumps(completion))
    _pool.release(conn)


async def _chunks(conn: _Upstream) -> Any:
    while chunk := await conn.read():
        yield chunk


async def _relay_stream(conn: _Upstream, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    pending = b""
    async for chunk in _chunks(conn):
        blocks = (pending + chunk).split(b"\n\n")
        pending = blocks.pop()
        out = []
        for block in blocks:
            if block.startswith(b"event: content_block_delta"):
                data = orjson.loads(block[block.index(b"data: ") + 6 :])
                text = data["delta"].get("text")
                if text:
                    out.append(CHUNK_HEAD + orjson.dumps(text) + b"}}]}\n\n")
            elif block.startswith(b"event: message_stop"):
                out.append(DONE)
        if out:
            await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
