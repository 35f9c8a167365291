"""A committed stream's events on their way to the client: one loop for every API.

After the commit point (the first token, gateway/exchange.py) the events of each upstream read go
through the handler's `StreamHooks` (Messages: passed through; the translated APIs: their stream
translator; the relays: the provider's own bytes, model renamed) and out in one write. An upstream
error event, a dropped stream or a disconnect ends the stream, billed as the hooks' `Failure`
says; at `message_stop` the usage is recorded before the final event goes out.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, NamedTuple, Protocol

from gateway.errors import GatewayError
from gateway.exchange import STREAM_FAILURES, ClientGone, Exchange, OpenStream, UsageTracker
from gateway.http import ApiRequest, StreamWriter
from gateway.protocols.anthropic.sse import SSEEvent

# Awaited once the usage is recorded, before the final event goes out (a stored copy).
After = Callable[[], Awaitable[None]] | None
# What a whole read's bytes go through on their way out (the relays' model rename), or None.
Rewrite = Callable[[bytes], bytes] | None


class Billed(enum.Enum):
    """What a stream that failed after its commit point is billed for."""

    OUTPUT = "output"  # the output so far: the usage reported, else estimated (EZAT's answers)
    REPORTED = "reported"  # only usage the provider reported (a relayed `response.failed`)
    NOTHING = "nothing"  # a relayed stream: the provider bills no failed generation (issue 30)


class Failure(NamedTuple):
    """How a stream ends in failure: its last bytes, the error told, what is billed."""

    payload: bytes
    err: GatewayError
    billed: Billed


class StreamHooks(Protocol):
    """What an API does with a committed stream's events."""

    ping: bytes  # its keep-alive
    rewrite: Rewrite  # applied to each write of the events' bytes

    def feed(self, event: SSEEvent, data: dict[str, Any]) -> bytes:
        """One upstream event as the client's bytes (b"" for none)."""
        ...

    def error(self, event: SSEEvent, data: dict[str, Any]) -> Failure | None:
        """The upstream's error `event`: how the stream ends, or None to pass it on (fed like
        any other event: a relayed Responses stream's non-terminal error)."""
        ...

    def failure(self, err: GatewayError) -> Failure:
        """How the stream ends when the stream itself failed (dropped, cut, undecodable)."""
        ...

    async def end(
        self, event: SSEEvent, data: dict[str, Any]
    ) -> tuple[bytes, bytes, After] | Failure:
        """At `message_stop`, before the usage record: what goes out before the cost comment,
        the final event after it, and what to await once recorded; or the failure the final
        event reports (a relayed `response.failed`)."""
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
    write = _writes(writer, hooks.rewrite)  # per read: chosen once
    try:
        async with aclosing(batches):
            async for batch in batches:
                # Events of one upstream read go out in one write (fewer ASGI sends).
                out: list[bytes] = []
                for event, data in batch:
                    name = event.name
                    if name == "error":
                        failed = hooks.error(event, data)
                        if failed is not None:
                            # What the same read held goes out first (the client must not lose
                            # the content it was owed); the output so far is billed before it.
                            if out:
                                await write(b"".join(out))
                            await _fail(request, exchange, writer, failed, tracker)
                            return 200
                    absorb(name, data)
                    chunk = feed(event, data)
                    if chunk:
                        out.append(chunk)
                    if name == "message_stop":
                        if out:
                            await write(b"".join(out))
                        ending = await hooks.end(event, data)
                        if type(ending) is Failure:
                            await _fail(request, exchange, writer, ending, tracker)
                            return 200
                        lead, final, after = ending
                        await exchange.record(tracker)  # recorded before the client sees the end
                        if after is not None:
                            await after()
                        await writer.write(lead + exchange.cost_comment() + final)
                        await writer.close()
                        exchange.log(200)
                        return 200
                if out:
                    await write(b"".join(out))
    except ClientGone:
        return await exchange.drain_after_disconnect(opened, tracker)
    except STREAM_FAILURES as exc:
        # After the commit point nothing can be retried: tell the client in-stream, bill what
        # the hooks say.
        failed = hooks.failure(exchange.stream_failure(exc))
        await _fail(request, exchange, writer, failed, tracker)
        return 200
    finally:
        opened.response.close()
        request.close()  # the body and the disconnect watcher are no longer needed
    raise AssertionError("event_batches ends only by return or raise")


def _writes(writer: StreamWriter, rewrite: Rewrite) -> Callable[[bytes], Awaitable[None]]:
    """How a read's bytes are written: as they are (no per-read test when nothing rewrites
    them), or through `rewrite`."""
    if rewrite is None:
        return writer.write

    def rewritten(data: bytes) -> Awaitable[None]:
        return writer.write(rewrite(data))

    return rewritten


async def _fail(
    request: ApiRequest,
    exchange: Exchange,
    writer: StreamWriter,
    failed: Failure,
    tracker: UsageTracker,
) -> None:
    billed = failed.billed
    bills = billed is Billed.OUTPUT or (billed is Billed.REPORTED and tracker.exact)
    await exchange.fail_stream(
        writer,
        failed.payload,
        502,
        client_gone=request.disconnected,
        err=failed.err,
        tracker=tracker if bills else None,
    )
