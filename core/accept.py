"""Accept every waiting connection in one turn of the event loop.

Why: uvloop (libuv 1.52) accepts one connection per turn of its loop; asyncio's own loop takes
up to the backlog at once. Under load a turn is long (it runs every ready request's next step),
so when 1,000 clients connect at once to a busy gateway, the last of them waited ~1,000 turns
in the kernel's accept queue: in the benchmark's burst that was a tail of 0.6-1 s on top of
the TTFT (issue 22), seen in `ss -ltn` as a listen queue stuck at a few hundred while the
gateway ran at full CPU. Here the listening socket is read by our own callback, which accepts
until the queue is empty (at most MAX_PER_TURN) and hands each socket to uvloop
(`connect_accepted_socket`), which then serves it as it would have.

Trade-off: one small task per new connection (not per request: keep-alive connections are
reused), measured in the benchmark; TLS is left to uvloop's own server (`create_server` is only
replaced for plain TCP).

Used by ezat/graceful.py around uvicorn's start-up, which calls `loop.create_server` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Counter

logger = logging.getLogger("ezat.serve")

# Enough for a burst; a bound so one turn cannot be spent accepting forever.
MAX_PER_TURN = 4096

ACCEPT_ERRORS = Counter(
    "ezat_accept_errors_total", "Connections the server could not accept or open", ["stage"]
)


class BatchAcceptServer:
    """The part of asyncio.Server uvicorn uses (sockets, close, wait_closed), accepting in
    batches."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        sock: socket.socket,
    ) -> None:
        self._loop = loop
        self._factory = protocol_factory
        self._sock = sock
        self._serving = True
        self._opening: set[asyncio.Task[Any]] = set()
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,) if self._serving else ()

    def is_serving(self) -> bool:
        return self._serving

    def _accept(self) -> None:
        for _ in range(MAX_PER_TURN):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE, ENOBUFS…: the next turn tries again
                ACCEPT_ERRORS.labels("accept").inc()
                logger.warning("accept failed: %s", exc)
                return
            conn.setblocking(False)
            task = self._loop.create_task(self._open(conn))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:  # the client left before it could be served
            ACCEPT_ERRORS.labels("open").inc()
            logger.info("accepted connection could not be opened: %s", exc)
            conn.close()

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    async def wait_closed(self) -> None:
        if self._opening:
            await asyncio.gather(*self._opening, return_exceptions=True)


@contextlib.contextmanager
def batched_accept(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While open, `loop.create_server(factory, sock=…)` for plain TCP returns a
    BatchAcceptServer (uvicorn's start-up calls it with the sockets it was given)."""
    original = loop.create_server

    async def create_server(
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        ssl: Any = None,
        backlog: int = 100,
        **kwargs: Any,
    ) -> Any:
        if sock is None or ssl is not None:
            return await original(
                protocol_factory, host, port, sock=sock, ssl=ssl, backlog=backlog, **kwargs
            )
        sock.listen(backlog)
        return BatchAcceptServer(loop, protocol_factory, sock)

    loop.create_server = create_server  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.create_server  # back to the class's method
