"""core/accept.py: a busy server accepts every waiting connection in one turn of its loop
(uvloop's own server takes one per turn), and what it accepts is served as before."""

from __future__ import annotations

import asyncio
import socket
import time

import uvloop

from core.accept import BatchAcceptServer, batched_accept

CLIENTS = 200


class _Busy:
    """A callback that re-schedules itself: each run is one turn of the loop, ~1 ms long."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.turns = 0
        self.running = True
        loop.call_soon(self.tick)

    def tick(self) -> None:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        self.turns += 1
        if self.running:
            self.loop.call_soon(self.tick)


def _connect_all(port: int) -> list[socket.socket]:
    clients = []
    for _ in range(CLIENTS):
        client = socket.socket()
        client.setblocking(False)
        try:
            client.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        clients.append(client)
    return clients


async def _turns_to_accept(batched: bool) -> int:
    loop = asyncio.get_running_loop()
    accepted: list[int] = []

    class Counting(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(1)

    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    if batched:
        with batched_accept(loop):
            server = await loop.create_server(Counting, sock=listener, backlog=4096)
        assert isinstance(server, BatchAcceptServer)
    else:
        server = await loop.create_server(Counting, sock=listener, backlog=4096)
    busy = _Busy(loop)
    clients = _connect_all(listener.getsockname()[1])
    start = busy.turns
    deadline = time.monotonic() + 30
    while len(accepted) < CLIENTS and time.monotonic() < deadline:
        await asyncio.sleep(0)
    busy.running = False
    turns = busy.turns - start
    assert len(accepted) == CLIENTS
    server.close()
    await server.wait_closed()
    for client in clients:
        client.close()
    return turns


def test_a_busy_loop_accepts_a_burst_in_a_few_turns() -> None:
    # uvloop's own server: one connection per turn (the reason for core/accept.py) ...
    assert uvloop.run(_turns_to_accept(batched=False)) >= CLIENTS // 2
    # ... the batched one: all of them within a few turns.
    assert uvloop.run(_turns_to_accept(batched=True)) <= 10


async def _echo_round_trip() -> bytes:
    loop = asyncio.get_running_loop()

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data.upper())  # type: ignore[attr-defined]

    listener = socket.create_server(("127.0.0.1", 0))
    with batched_accept(loop):
        server = await loop.create_server(Echo, sock=listener)
    assert server.sockets == (listener,)
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
    writer.write(b"ping")
    answer = await asyncio.wait_for(reader.readexactly(4), 10)
    writer.close()
    server.close()
    assert not server.is_serving()
    assert listener.fileno() == -1  # closed: no new connections
    await server.wait_closed()
    return answer


def test_accepted_connections_are_served_and_close_stops_accepting() -> None:
    assert uvloop.run(_echo_round_trip()) == b"PING"


def test_create_server_is_the_loops_own_again_after_start_up() -> None:
    async def check() -> None:
        loop = asyncio.get_running_loop()
        with batched_accept(loop):
            assert "create_server" in vars(loop)
        assert "create_server" not in vars(loop)

    uvloop.run(check())
