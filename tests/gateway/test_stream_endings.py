"""How a committed stream's end is billed when it ends badly (gateway/exchange.py): the parts that
need no running gateway. The amounts are checked end to end in tests/gateway/test_partial_streams.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.exchange import STREAM_FAILED, Exchange
from gateway.usage import UsageTracker


class Writer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    async def write(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self) -> None:
        self.closed = True


def _exchange(calls: list[Any]) -> Exchange:
    """An Exchange with only what its ending touches; record() and settle() write down calls."""
    exchange = Exchange.__new__(Exchange)
    exchange._tracker = None
    exchange._settled = False
    exchange._recorded_cost = 0
    exchange.balance_nano = 10_000_000_000  # admitted against $10 (x-ezat-balance-usd)
    exchange.tokens = None
    exchange.http_status = None
    exchange.error = None

    async def record(tracker: UsageTracker, *, status: str = "ok") -> int:
        calls.append(("record", status))
        exchange.tokens = tracker.tokens  # type: ignore[assignment]  # recorded: any non-None
        exchange._recorded_cost = 123
        return 123

    async def settle() -> None:
        calls.append(("settle",))
        exchange._settled = True

    exchange.record = record  # type: ignore[method-assign]
    exchange.settle = settle  # type: ignore[method-assign]
    return exchange


def test_a_failure_before_the_first_token_bills_nothing() -> None:
    calls: list[Any] = []
    exchange, writer = _exchange(calls), Writer()
    asyncio.run(exchange.fail_stream(writer, b"event: error\n\n", 502))  # type: ignore[arg-type]
    assert calls == [("settle",)]
    assert writer.sent == [b"event: error\n\n"] and writer.closed
    assert exchange.http_status == 502


def test_a_failure_after_the_first_token_is_recorded_before_the_client_sees_the_error() -> None:
    calls: list[Any] = []
    exchange, writer = _exchange(calls), Writer()
    tracker = UsageTracker()
    asyncio.run(
        exchange.fail_stream(writer, b"event: error\n\n", 502, tracker=tracker)  # type: ignore[arg-type]
    )
    assert calls == [("record", STREAM_FAILED), ("settle",)]
    # The cost as billed, and the balance after it, precede the error event (SSE comments the
    # SDKs skip).
    assert writer.sent == [
        b": x-ezat-cost-usd: 0.000000123\n: x-ezat-balance-usd: 9.999999877\n\nevent: error\n\n"
    ]


def test_a_stream_already_recorded_is_not_recorded_again_when_it_fails_or_is_cancelled() -> None:
    calls: list[Any] = []
    exchange, writer = _exchange(calls), Writer()
    exchange.tokens = object()  # type: ignore[assignment]  # recorded (message_stop came)
    exchange._tracker = UsageTracker()
    asyncio.run(exchange.fail_stream(writer, b"x", 502, tracker=UsageTracker()))  # type: ignore[arg-type]
    asyncio.run(exchange.end_cancelled())
    assert calls == [("settle",), ("settle",)]


def test_a_cancelled_committed_stream_is_billed_as_a_disconnect_and_an_uncommitted_one_not() -> (
    None
):
    calls: list[Any] = []
    committed = _exchange(calls)
    committed._tracker = UsageTracker()
    asyncio.run(committed.end_cancelled())
    assert calls == [("record", "client_disconnected"), ("settle",)]
    calls.clear()
    asyncio.run(_exchange(calls).end_cancelled())
    assert calls == [("settle",)]
