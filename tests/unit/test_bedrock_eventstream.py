"""Bedrock's event stream: the simulator's encoder against botocore's decoder (hypothesis), and
the gateway's decoder turning frames into Anthropic events, exceptions into error events, and
anything unreadable into a FramingError (the attempt ends cleanly)."""

from __future__ import annotations

import base64

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from gateway.platforms.eventstream import BedrockStreamDecoder, FramingError
from gateway.simulator import eventstream

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
