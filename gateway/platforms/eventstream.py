"""Bedrock's response stream (`application/vnd.amazon.eventstream`) as Anthropic stream events.

Framing (reference §1.4, AWS event-stream encoding, botocore's `eventstream.py`): each message
is a prelude (lengths and their CRC32), headers, a payload and a CRC32 of all of it. Bedrock
sends `:message-type: event` / `:event-type: chunk` messages whose payload is
`{"bytes": "<base64>"}`, the base64 being one Anthropic stream event (no SSE framing); the final
event also carries `amazon-bedrock-invocationMetrics`, which is dropped here (usage is read from
the Anthropic fields the same events carry). Exceptions arrive as `:message-type: exception`
messages inside the HTTP 200 (`:exception-type: throttlingException`, …) and become Anthropic
`error` events, so the exchange treats them as it treats the Anthropic API's own.

Decoding uses botocore's `EventStreamBuffer` (prelude and message CRCs checked, lengths bounded).
A broken CRC, an oversized or unknown frame raises `FramingError`, an `UpstreamDisconnected`:
the attempt ends cleanly (before the first token the exchange fails over; after it the client
gets an error event and the usage so far is billed).
"""

from __future__ import annotations

import base64
import binascii

import orjson
from botocore.eventstream import EventStreamBuffer, EventStreamError, ParserError

from gateway.protocols.anthropic.sse import SSEEvent
from gateway.upstream import UpstreamDisconnected

METRICS_KEY = b"amazon-bedrock-invocationMetrics"

# Stream exception (the ResponseStream member name) → Anthropic error type.
EXCEPTION_TYPES: dict[str, str] = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "modelStreamErrorException": "overloaded_error",
    "internalServerException": "api_error",
    "modelTimeoutException": "timeout_error",
    "validationException": "invalid_request_error",
}


class FramingError(UpstreamDisconnected):
    """Bedrock sent a frame that cannot be read (bad CRC, unknown message, bad payload)."""


def _event(name: str, data: bytes) -> SSEEvent:
    return SSEEvent(name, data, b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")


def error_event(error_type: str, message: str) -> SSEEvent:
    data = orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})
    return _event("error", data)


class BedrockStreamDecoder:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer.add_data(chunk)
        events: list[SSEEvent] = []
        try:
            for message in self._buffer:
                events.append(_convert(message.headers, message.payload))
        except (ParserError, EventStreamError) as exc:
            raise FramingError(f"unreadable Bedrock stream frame ({type(exc).__name__})") from None
        return events


def _convert(headers: dict[str, object], payload: bytes) -> SSEEvent:
    kind = headers.get(":message-type")
    if kind == "event":
        if headers.get(":event-type") != "chunk":
            raise FramingError(f"unexpected Bedrock event {headers.get(':event-type')!r}")
        try:
            data = base64.b64decode(orjson.loads(payload)["bytes"], validate=True)
            parsed = orjson.loads(data)
            name = parsed["type"]
        except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error):
            raise FramingError("a Bedrock chunk without a readable event") from None
        if not isinstance(name, str):
            raise FramingError("a Bedrock chunk without an event type")
        if METRICS_KEY in data:
            parsed.pop(METRICS_KEY.decode(), None)
            data = orjson.dumps(parsed)
        return _event(name, data)
    if kind == "exception":
        exception = str(headers.get(":exception-type") or "")
        try:
            message = str(orjson.loads(payload).get("message") or exception)
        except (orjson.JSONDecodeError, AttributeError):
            message = exception or "Bedrock stream exception"
        return error_event(EXCEPTION_TYPES.get(exception, "api_error"), message)
    if kind == "error":
        code = str(headers.get(":error-code") or "error")
        return error_event("api_error", str(headers.get(":error-message") or code))
    raise FramingError(f"unexpected Bedrock message type {kind!r}")
