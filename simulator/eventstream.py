"""Encoding AWS event-stream messages, as Bedrock's response stream frames them.

Format (AWS event-stream encoding, https://docs.aws.amazon.com/lexv2/latest/dg/event-stream-encoding.html;
botocore `eventstream.py`): total length u32, headers length u32, CRC32 of those 8 bytes, headers
(name length u8, name, type 7 = string, value length u16, value), payload, CRC32 of everything
before it. botocore has a decoder but no encoder; the simulator needs one, and tests check it
against botocore's decoder.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

STRING = 7


def encode_headers(headers: Mapping[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        out += struct.pack("!B", len(raw_name)) + raw_name
        out += struct.pack("!BH", STRING, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    head = encode_headers(headers)
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack("!I", zlib.crc32(body))


def chunk(event: Mapping[str, Any] | bytes) -> bytes:
    """A `chunk` event carrying one Anthropic stream event (JSON) as base64 `bytes`."""
    data = event if isinstance(event, bytes) else orjson.dumps(event)
    payload = orjson.dumps({"bytes": base64.b64encode(data).decode()})
    return encode_message(
        {
            ":event-type": "chunk",
            ":content-type": "application/json",
            ":message-type": "event",
        },
        payload,
    )


def exception(name: str, message: str) -> bytes:
    """An exception message (`throttlingException`, …) inside the HTTP 200 stream."""
    return encode_message(
        {
            ":exception-type": name,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        orjson.dumps({"message": message}),
    )


def corrupt(message: bytes) -> bytes:
    """The same message with its final CRC broken."""
    return message[:-4] + bytes(b ^ 0xFF for b in message[-4:])
