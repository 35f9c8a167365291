"""First tokens before bulk (gateway/first_tokens.py): a stream past its first token gives way
to first tokens that have arrived and not yet run, counted by the upstream connection."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway import first_tokens
from gateway.first_tokens import FirstTokenGate, gate
from gateway.metrics import FIRST_TOKEN_GATE_TIMEOUTS
from gateway.upstream import UpstreamClient, UpstreamResponse, _Connection

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENT = b"event: content_block_delta\ndata: {}\n\n"


@pytest.fixture(autouse=True)
def fresh_gate() -> Iterator[None]:
    gate.reset()
    yield
    gate.reset()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def streaming_response() -> tuple[_Connection, UpstreamResponse]:
    """A provider response whose headers have arrived; body bytes are fed by the test."""
    conn = _Connection(("http", "127.0.0.1", 1))
    conn.data_received(HEAD)
    return conn, UpstreamResponse(UpstreamClient(), conn)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_bulk_waits_for_a_first_token_that_arrived_before_its_turn() -> None:
    conn, response = streaming_response()
    response.awaiting_first_token(True)
    order: list[str] = []
    go = asyncio.Event()

    async def first_token() -> None:
        await response.readany()
        order.append("first token")

    async def bulk() -> None:
        await go.wait()
        if gate.ready:
            await gate.wait_turn()
        order.append("bulk")

    tasks = [asyncio.create_task(bulk()), asyncio.create_task(first_token())]
    await settle()
    # The bulk is queued to run before the reader: first come, first served would run it first.
    go.set()
    conn.data_received(chunk(EVENT))
    assert gate.ready == 1
    await asyncio.gather(*tasks)
    assert order == ["first token", "bulk"]
    assert gate.ready == 0


async def woken_reader(awaiting_first: bool) -> asyncio.Task[bytes]:
    """A reader parked in `readany`, then woken by an event that has not run yet."""
    conn, response = streaming_response()
    response.awaiting_first_token(awaiting_first)
    reader = asyncio.create_task(response.readany())
    await settle()
    conn.data_received(chunk(EVENT))
    return reader


async def test_a_reader_past_its_first_token_is_not_counted() -> None:
    reader = await woken_reader(awaiting_first=False)
    assert gate.ready == 0
    assert await reader == EVENT


async def test_a_cancelled_reader_uncounts_itself() -> None:
    reader = await woken_reader(awaiting_first=True)
    assert gate.ready == 1
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert gate.ready == 0


async def test_no_waiting_when_no_first_token_is_ready() -> None:
    local = FirstTokenGate()
    order: list[str] = []

    async def other() -> None:
        order.append("other")

    task = asyncio.create_task(other())
    await local.wait_turn()  # must not give up the loop: `other` has not run yet
    order.append("caller")
    await task
    assert order == ["caller", "other"]


async def test_first_tokens_arriving_during_the_release_still_go_first() -> None:
    local = FirstTokenGate()
    order: list[str] = []
    local.arrived()

    async def bulk() -> None:
        await local.wait_turn()
        order.append("bulk")

    task = asyncio.create_task(bulk())
    await settle()
    local.taken()  # released: the bulk's wake-up is queued ...
    local.arrived()  # ... and before it runs, another first token arrives
    await settle()
    assert order == []
    local.taken()
    await task
    assert order == ["bulk"]


async def test_a_count_that_never_comes_down_is_reset_after_max_wait(monkeypatch) -> None:
    monkeypatch.setattr(first_tokens, "MAX_WAIT", 0.01)
    local = FirstTokenGate()
    local.arrived()  # a reader that will never run
    before = FIRST_TOKEN_GATE_TIMEOUTS._value.get()
    await asyncio.wait_for(local.wait_turn(), 5)
    assert FIRST_TOKEN_GATE_TIMEOUTS._value.get() == before + 1
    assert local.ready == 0
    await asyncio.wait_for(local.wait_turn(), 5)  # nothing held back any more
    assert FIRST_TOKEN_GATE_TIMEOUTS._value.get() == before + 1
