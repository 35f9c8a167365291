"""Bedrock's event stream: the simulator's encoder and the gateway's hand-written reader against
botocore's decoder (hypothesis), and the gateway's decoder turning frames into Anthropic events, exceptions into error events, and
anything unreadable into a FramingError (the attempt ends cleanly)."""

from __future__ import annotations

import base64

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer, ParserError
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.bedrock.eventstream import (
    BedrockStreamDecoder,
    EventStreamReader,
    FramingError,
)
from simulator import eventstream

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@given(headers=st.dictionaries(names, values, max_size=5), payload=st.binary(max_size=2000))
def test_encoder_round_trips_through_botocore(headers: dict[str, str], payload: bytes) -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(eventstream.encode_message(headers, payload))
    [message] = list(buffer)
    assert message.payload == payload
    assert message.headers == headers


events = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["content_block_delta", "ping", "message_delta"]),
            "n": st.integers(-(2**63), 2**63 - 1),
        }
    ),
    min_size=1,
    max_size=8,
)


@given(sent=events, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6))
def test_decoder_yields_each_event_once_however_the_bytes_are_split(
    sent: list[dict[str, object]], cuts: list[int]
) -> None:
    stream = b"".join(eventstream.chunk(e) for e in sent)
    points = sorted({min(c, len(stream)) for c in cuts})
    decoder = BedrockStreamDecoder()
    got = []
    start = 0
    for point in [*points, len(stream)]:
        got += decoder.feed(stream[start:point])
        start = point
    assert [orjson.loads(e.data) for e in got] == sent
    assert [e.name for e in got] == [e["type"] for e in sent]
    assert all(e.raw == b"event: " + e.name.encode() + b"\ndata: " + e.data + b"\n\n" for e in got)


def test_invocation_metrics_are_dropped() -> None:
    stop = {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}}
    [event] = BedrockStreamDecoder().feed(eventstream.chunk(stop))
    assert orjson.loads(event.data) == {"type": "message_stop"}


@pytest.mark.parametrize(
    ("exception", "error_type"),
    [
        ("throttlingException", "rate_limit_error"),
        ("serviceUnavailableException", "overloaded_error"),
        ("modelStreamErrorException", "overloaded_error"),
        ("validationException", "invalid_request_error"),
        ("internalServerException", "api_error"),
    ],
)
def test_exceptions_become_error_events(exception: str, error_type: str) -> None:
    [event] = BedrockStreamDecoder().feed(eventstream.exception(exception, "slow down"))
    assert event.name == "error"
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": error_type, "message": "slow down"},
    }


@pytest.mark.parametrize(
    "frame",
    [
        eventstream.corrupt(eventstream.chunk({"type": "ping"})),
        eventstream.encode_message({":message-type": "event", ":event-type": "trace"}, b"{}"),
        eventstream.encode_message({":message-type": "event", ":event-type": "chunk"}, b"not json"),
        eventstream.encode_message(
            {":message-type": "event", ":event-type": "chunk"},
            orjson.dumps({"bytes": base64.b64encode(b'{"no": "type"}').decode()}),
        ),
        eventstream.encode_message({":message-type": "surprise"}, b""),
        b"\x00\x00\x00\x10\x00\x00\x00\x00" + b"\xde\xad\xbe\xef" + b"\x00" * 4,
    ],
    ids=[
        "bad-crc",
        "unknown-event",
        "bad-payload",
        "no-type",
        "unknown-message",
        "bad-prelude-crc",
    ],
)
def test_unreadable_frames_raise_framing_error(frame: bytes) -> None:
    decoder = BedrockStreamDecoder()
    good = decoder.feed(eventstream.chunk({"type": "ping"}))
    assert [e.name for e in good] == ["ping"]
    with pytest.raises(FramingError):
        decoder.feed(frame)


# -- the hand-written reader against botocore's decoder ----------------------------------------

messages = st.lists(
    st.tuples(st.dictionaries(names, values, max_size=4), st.binary(max_size=600)),
    min_size=1,
    max_size=6,
)


def botocore_messages(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(m.headers), m.payload) for m in buffer]


@given(sent=messages, cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=5))
def test_reader_agrees_with_botocore_however_the_bytes_are_split(
    sent: list[tuple[dict[str, str], bytes]], cuts: list[int]
) -> None:
    stream = b"".join(eventstream.encode_message(h, p) for h, p in sent)
    reader = EventStreamReader()
    got = []
    start = 0
    for point in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        got += reader.feed(stream[start:point])
        start = point
    assert got == botocore_messages(stream) == [(h, p) for h, p in sent]


@given(sent=messages, where=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_reader_refuses_what_botocore_refuses(
    sent: list[tuple[dict[str, str], bytes]], where: int, flip: int
) -> None:
    stream = bytearray(b"".join(eventstream.encode_message(h, p) for h, p in sent))
    stream[where % len(stream)] ^= flip
    data = bytes(stream)
    try:
        expected = botocore_messages(data)
    except ParserError:
        with pytest.raises(FramingError):
            EventStreamReader().feed(data)
        return
    # botocore accepted (a length grew: it waits for more bytes): so does the reader.
    assert EventStreamReader().feed(data) == expected


def test_reader_reads_every_header_type() -> None:
    import struct
    import zlib

    block = (
        b"\x01t\x00"
        + b"\x01f\x01"
        + b"\x01b\x02\xff"
        + b"\x01s\x03\x00\x02"
        + b"\x01i\x04\x00\x00\x00\x03"
        + b"\x01l\x05"
        + struct.pack("!q", -4)
        + b"\x01y\x06\x00\x02ab"
        + b"\x01c\x07\x00\x02hi"
        + b"\x01m\x08"
        + struct.pack("!q", 1700000000000)
        + b"\x01u\x09"
        + bytes(range(16))
    )
    total = 16 + len(block) + 3
    prelude = struct.pack("!II", total, len(block))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + block + b"abc"
    message = body + struct.pack("!I", zlib.crc32(body))
    [(headers, payload)] = EventStreamReader().feed(message)
    assert payload == b"abc"
    boto = botocore_messages(message)[0][0]
    assert headers["t"] is True and headers["f"] is False and headers["b"] == -1
    assert headers["s"] == 2 and headers["i"] == 3 and headers["l"] == -4
    assert headers["y"] == b"ab" and headers["c"] == "hi" and headers["m"] == 1700000000000
    assert headers["u"] == bytes(range(16)) and boto["c"] == "hi" and boto["l"] == -4
