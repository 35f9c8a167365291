"""Bedrock's response stream (`application/vnd.amazon.eventstream`) as Anthropic stream events.

Framing (reference §1.4, AWS event-stream encoding, botocore's `eventstream.py`): each message
is a prelude (total length u32, headers length u32, CRC32 of those 8 bytes), headers, a payload
and a CRC32 of everything before it. Bedrock sends `:message-type: event` /
`:event-type: chunk` messages whose payload is `{"bytes": "<base64>"}` (plus, on the real
service, a `p` padding field), the base64 being one Anthropic stream event (no SSE framing); the
final event also carries `amazon-bedrock-invocationMetrics`, which is dropped here (usage is read
from the Anthropic fields the same events carry). Exceptions arrive as `:message-type: exception`
messages inside the HTTP 200 (`:exception-type: throttlingException`, …) and become Anthropic
`error` events, so the exchange treats them as it treats the Anthropic API's own.

Hand-written, not botocore's `EventStreamBuffer`, because of what it costs (bench/platforms.py,
this machine, 2 CPUs, C=16, 1k-token prompt): with botocore's decoder a streamed event cost the
gateway 56 µs on Bedrock against 6 µs on the Anthropic kind (9.4×, target ≤ 2×) with the events
back to back; in isolation botocore decoded 36 µs per event against 2.6 µs for the SSE parser.
Its buffer re-slices its whole remainder per message and builds header objects per message; this
one walks a memoryview, checks both CRCs with zlib's C CRC32, and parses a header block once per
distinct block (Bedrock repeats the same three headers on every chunk). tests/gateway/providers/
test_bedrock_eventstream.py checks it against botocore's decoder with hypothesis (any messages,
any split of the bytes, corrupted bytes refused by both).

A broken CRC, an oversized, truncated or unknown frame raises `FramingError`, a
`ConnectionError` like the upstream client's own `UpstreamDisconnected` (the decoder's error
belongs with the decoder, so this module imports nothing of the client): the attempt ends
cleanly (before the first token the exchange fails over; after it the client gets an error
event).
"""

from __future__ import annotations

import binascii
import re
import struct
from binascii import a2b_base64
from zlib import crc32

import orjson

from gateway.protocols.anthropic.sse import SSEEvent

METRICS_KEY = b"amazon-bedrock-invocationMetrics"
# botocore's limits (eventstream.py): headers ≤ 128 KiB, payload ≤ 24 MiB.
MAX_HEADERS = 128 * 1024
MAX_PAYLOAD = 24 * 1024 * 1024
_PRELUDE = struct.Struct("!III")
_CRC = struct.Struct("!I")
# Header value sizes by type (0 true, 1 false, 2 byte, 3 short, 4 int, 5 long, 6 bytes,
# 7 string, 8 timestamp, 9 uuid); 6 and 7 carry a u16 length.
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
_TYPE = re.compile(rb'\{\s*"type"\s*:\s*"([A-Za-z_]{1,64})"')

# Stream exception (the ResponseStream member name) → Anthropic error type.
EXCEPTION_TYPES: dict[str, str] = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "modelStreamErrorException": "overloaded_error",
    "internalServerException": "api_error",
    "modelTimeoutException": "timeout_error",
    "validationException": "invalid_request_error",
}

HeaderValue = bool | int | bytes | str


class FramingError(ConnectionError):
    """Bedrock sent a frame that cannot be read (bad CRC, unknown message, bad payload)."""


def parse_headers(block: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    pos, end = 0, len(block)
    try:
        while pos < end:
            name_len = block[pos]
            name = block[pos + 1 : pos + 1 + name_len].decode()
            pos += 1 + name_len
            kind = block[pos]
            pos += 1
            if kind in (6, 7):
                size = int.from_bytes(block[pos : pos + 2], "big")
                raw = block[pos + 2 : pos + 2 + size]
                if len(raw) != size:
                    raise FramingError("a truncated event-stream header")
                headers[name] = raw.decode() if kind == 7 else raw
                pos += 2 + size
            elif kind in _FIXED:
                size = _FIXED[kind]
                raw = block[pos : pos + size]
                if len(raw) != size:
                    raise FramingError("a truncated event-stream header")
                if kind in (0, 1):
                    headers[name] = kind == 0
                elif kind == 9:
                    headers[name] = raw
                else:
                    headers[name] = int.from_bytes(raw, "big", signed=True)
                pos += size
            else:
                raise FramingError(f"unknown event-stream header type {kind}")
    except (IndexError, UnicodeDecodeError):
        raise FramingError("an unreadable event-stream header block") from None
    return headers


class EventStreamReader:
    """Splits bytes into (headers, payload) messages, checking lengths and both CRCs."""

    __slots__ = ("_buffer", "_headers", "_last", "_last_headers")

    def __init__(self) -> None:
        self._buffer = b""
        self._headers: dict[bytes, dict[str, HeaderValue]] = {}
        # The last header block and its parse: Bedrock repeats one block on every chunk, and
        # comparing in place (startswith at an offset) spares a copy and a hash per message.
        self._last = b"\x00"
        self._last_headers: dict[str, HeaderValue] = {}

    def feed(self, chunk: bytes) -> list[tuple[dict[str, HeaderValue], bytes]]:
        buf = self._buffer + chunk if self._buffer else chunk
        view = memoryview(buf)
        size = len(buf)
        pos = 0
        messages = []
        cache = self._headers
        while size - pos >= 16:
            total, headers_len, prelude_crc = _PRELUDE.unpack_from(buf, pos)
            if crc32(view[pos : pos + 8]) != prelude_crc:
                raise FramingError("event-stream prelude CRC mismatch")
            if headers_len > MAX_HEADERS or total - headers_len - 16 > MAX_PAYLOAD:
                raise FramingError("an event-stream message over the size limits")
            if total < headers_len + 16:
                raise FramingError("an event-stream message shorter than its headers")
            end = pos + total
            if end > size:
                break
            if crc32(view[pos + 8 : end - 4], prelude_crc) != _CRC.unpack_from(buf, end - 4)[0]:
                raise FramingError("event-stream message CRC mismatch")
            last = self._last
            if headers_len == len(last) and buf.startswith(last, pos + 12):
                headers = self._last_headers
            else:
                head = buf[pos + 12 : pos + 12 + headers_len]
                headers = cache.get(head)
                if headers is None:
                    headers = parse_headers(head)
                    if len(cache) < 64:
                        cache[head] = headers
                self._last, self._last_headers = head, headers
            messages.append((headers, buf[pos + 12 + headers_len : end - 4]))
            pos = end
        self._buffer = buf[pos:] if pos < size else b""
        return messages


def _event(name: str, data: bytes) -> SSEEvent:
    return SSEEvent(name, data, b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")


def error_event(error_type: str, message: str) -> SSEEvent:
    data = orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})
    return _event("error", data)


class BedrockStreamDecoder:
    __slots__ = ("_reader",)

    def __init__(self) -> None:
        self._reader = EventStreamReader()

    def feed(self, chunk: bytes, limit: int | None = None) -> list[SSEEvent]:
        # `limit` is ignored: Bedrock frames one event per message, read as they come.
        return [_convert(h, p) for h, p in self._reader.feed(chunk)]


_BYTES_PREFIX = b'{"bytes":"'
# Event names seen so far (bytes → str), so a name is decoded once per stream, not per event.
_NAMES: dict[bytes, str] = {}


def _convert(headers: dict[str, HeaderValue], payload: bytes) -> SSEEvent:
    kind = headers.get(":message-type")
    if kind == "event":
        if headers.get(":event-type") != "chunk":
            raise FramingError(f"unexpected Bedrock event {headers.get(':event-type')!r}")
        try:
            if payload.startswith(_BYTES_PREFIX):
                # {"bytes":"<base64>", …}: base64 has no quote, so the value ends at the next one.
                encoded: bytes | str = payload[10 : payload.index(b'"', 10)]
            else:
                encoded = orjson.loads(payload)["bytes"]
            data = a2b_base64(encoded, strict_mode=True)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error):
            raise FramingError("a Bedrock chunk without a readable event") from None
        found = _TYPE.match(data)
        if found is not None:
            raw_name = found.group(1)
            name = _NAMES.get(raw_name)
            if name is None:
                name = raw_name.decode()
                if len(_NAMES) < 256:
                    _NAMES[raw_name] = name
        else:
            # Not the usual shape ({"type": … first): parse to find it.
            try:
                found_name = orjson.loads(data).get("type")
            except (orjson.JSONDecodeError, AttributeError):
                found_name = None
            if not isinstance(found_name, str):
                raise FramingError("a Bedrock chunk without an event type")
            name, raw_name = found_name, found_name.encode()
        if METRICS_KEY in data:
            parsed = orjson.loads(data)
            parsed.pop(METRICS_KEY.decode(), None)
            data = orjson.dumps(parsed)
        return SSEEvent(name, data, b"event: " + raw_name + b"\ndata: " + data + b"\n\n")
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
