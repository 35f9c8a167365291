"""A committed stream's events on their way to the client: one loop for every API.

After the commit point (the first token, gateway/exchange.py) the events of each upstream read go
through the handler's `StreamHooks` (Messages: passed through; the translated APIs: their stream
translator) and out in one write. An upstream error event, a dropped stream or a disconnect ends
the stream, billed for what it produced; at `message_stop` the usage is recorded before the
final event goes out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, Protocol

from gateway.errors import GatewayError
from gateway.exchange import STREAM_FAILURES, ClientGone, Exchange, OpenStream, UsageTracker
from gateway.handlers.translated import error_from_event
from gateway.http import ApiRequest, StreamWriter
from gateway.protocols.anthropic.sse import SSEEvent

# Awaited once the usage is recorded, before the final event goes out (a stored copy).
After = Callable[[], Awaitable[None]] | None


class StreamHooks(Protocol):
    """What an API does with a committed stream's events."""

    ping: bytes  # its keep-alive

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        """One upstream event as the client's bytes (b"" for none)."""
        ...

    def failure(self, err: GatewayError, event: SSEEvent | None) -> bytes:
        """The stream's last bytes when it fails: for the upstream's error `event`, or for a
        failure of the stream itself (None)."""
        ...

    async def end(self, event: SSEEvent) -> tuple[bytes, bytes, After]:
        """At `message_stop`, before the usage record: what goes out before the cost comment,
        the final event after it, and what to await once recorded."""
        ...


async def pump(
    request: ApiRequest,
    exchange: Exchange,
    opened: OpenStream,
    writer: StreamWriter,
    hooks: StreamHooks,
) -> int:
    """The stream from its commit point to its end; the usage is recorded before the end."""
    tracker = UsageTracker()
    exchange.checkpoint(tracker)
    disconnected = request.watch_disconnect()
    batches = exchange.event_batches(opened, writer, hooks.ping, disconnected)
    feed, absorb = hooks.feed, tracker.absorb  # per event: looked up once
    try:
        async with aclosing(batches):
            async for batch in batches:
                # Events of one upstream read go out in one write (fewer ASGI sends).
                out: list[bytes] = []
                for event, data in batch:
                    name = event.name
                    if name == "error":
                        # What the same read held goes out first (the client must not lose the
                        # content it was owed); the output so far is billed before the error.
                        if out:
                            await writer.write(b"".join(out))
                        err = error_from_event(data)
                        await _fail(
                            request, exchange, writer, hooks.failure(err, event), err, tracker
                        )
                        return 200
                    absorb(name, data)
                    chunk = feed(event, data)
                    if chunk:
                        out.append(chunk)
                    if name == "message_stop":
                        if out:
                            await writer.write(b"".join(out))
                        lead, final, after = await hooks.end(event)
                        await exchange.record(tracker)  # recorded before the client sees the end
                        if after is not None:
                            await after()
                        await writer.write(lead + exchange.cost_comment() + final)
                        await writer.close()
                        exchange.log(200)
                        return 200
                if out:
                    await writer.write(b"".join(out))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        # After the commit point nothing can be retried: tell the client in-stream, bill the
        # output produced so far.
        err = exchange.stream_failure(exc)
        await _fail(request, exchange, writer, hooks.failure(err, None), err, tracker)
        return 200
    finally:
        opened.response.close()
        request.close()  # the body and the disconnect watcher are no longer needed
    raise AssertionError("event_batches ends only by return or raise")


async def _fail(
    request: ApiRequest,
    exchange: Exchange,
    writer: StreamWriter,
    payload: bytes,
    err: GatewayError,
    tracker: UsageTracker,
) -> None:
    await exchange.fail_stream(
        writer, payload, 502, client_gone=request.disconnected, err=err, tracker=tracker
    )
