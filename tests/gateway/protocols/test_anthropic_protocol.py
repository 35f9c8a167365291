"""The Messages API's own checks and SSE framing: pure modules, table-driven and property tests."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.protocols.anthropic import sse, validation

OK = {"model": "sonnet", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("change", "param", "needle"),
    [
        ({"model": None}, "model", "required"),
        ({"model": 3}, "model", "string"),
        ({"model": ""}, "model", "1 to 128"),
        ({"model": "   "}, "model", "1 to 128"),
        ({"model": "m" * 129}, "model", "1 to 128"),
        ({"messages": None}, "messages", "required"),
        ({"messages": []}, "messages", "non-empty"),
        ({"messages": {"role": "user"}}, "messages", "non-empty array"),
        ({"max_tokens": None}, "max_tokens", "required"),
        ({"max_tokens": "10"}, "max_tokens", "integer"),
        ({"max_tokens": 1.0}, "max_tokens", "integer"),
        ({"max_tokens": True}, "max_tokens", "integer"),
        ({"max_tokens": 0}, "max_tokens", "at least 1"),
        ({"max_tokens": -5}, "max_tokens", "at least 1"),
        ({"stream": "true"}, "stream", "boolean"),
        ({"stream": 1}, "stream", "boolean"),
    ],
)
def test_invalid_bodies_name_the_field(change: dict, param: str, needle: str) -> None:
    body = {**OK, **change}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(GatewayError) as raised:
        validation.check_body(body)
    assert raised.value.status == 400 and raised.value.param == param
    assert raised.value.message.startswith(param) and needle in raised.value.message
    assert raised.value.type == "invalid_request_error"


@pytest.mark.parametrize("body", [[], "x", 3, None])
def test_non_object_body(body: object) -> None:
    with pytest.raises(GatewayError, match="JSON object"):
        validation.check_body(body)


def test_valid_body_keeps_the_name_as_sent() -> None:
    checked = validation.check_body({**OK, "model": " Sonnet ", "stream": True})
    assert (checked.model, checked.max_tokens, checked.stream) == (" Sonnet ", 10, True)


def test_other_fields_are_not_checked() -> None:
    validation.check_body({**OK, "temperature": "hot", "tools": None, "thinking": 7})
    validation.check_body({**OK, "tools": [{"name": "f", "input_schema": "the provider's job"}]})


@pytest.mark.parametrize("count_tokens", [False, True])
@pytest.mark.parametrize(
    ("tools", "param"),
    [(5, "tools"), (True, "tools"), (1.5, "tools"), ("f", "tools"), ({"name": "f"}, "tools"),
     ([{"name": "f"}, 5], "tools[1]"), ([None], "tools[0]")],
)  # fmt: skip
def test_tools_of_a_wrong_json_type_is_refused_naming_tools(
    tools: object, param: str, count_tokens: bool
) -> None:
    """Issue 31 item 7: the gateway reads `tools` before any upstream call (its routing
    prefix), so their shape is checked here, a 400 rather than a 500."""
    with pytest.raises(GatewayError) as raised:
        validation.check_body({**OK, "tools": tools}, count_tokens=count_tokens)
    assert (raised.value.status, raised.value.type) == (400, "invalid_request_error")
    assert raised.value.param == param and raised.value.message.startswith(param)


def test_count_tokens_ignores_max_tokens_and_stream() -> None:
    checked = validation.check_body(
        {"model": "m", "messages": [{}], "max_tokens": "x", "stream": "y"}, count_tokens=True
    )
    assert checked.max_tokens is None and checked.stream is False
    with pytest.raises(GatewayError, match="messages"):
        validation.check_body({"model": "m", "messages": []}, count_tokens=True)


def test_max_tokens_above_the_model_limit() -> None:
    validation.check_max_tokens(64000, "anthropic/x", 64000)
    with pytest.raises(GatewayError) as raised:
        validation.check_max_tokens(64001, "anthropic/x", 64000)
    assert raised.value.param == "max_tokens" and "64000" in raised.value.message


def test_unknown_model_is_404_not_found() -> None:
    err = validation.unknown_model("gpt-9")
    assert (err.status, err.type, err.code) == (404, "not_found_error", "model_not_found")


def test_strip_cache_control_everywhere() -> None:
    body = {
        "cache_control": {"type": "ephemeral"},
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {"name": "t", "input_schema": {}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "x",
                        "content": [
                            {"type": "text", "text": "deep", "cache_control": {"type": "ephemeral"}}
                        ],
                    }
                ],
            }
        ],
    }
    assert validation.strip_cache_control(body) is True
    assert b"cache_control" not in orjson.dumps(body)
    assert body["messages"][0]["content"][0]["content"][0]["text"] == "deep"
    assert validation.strip_cache_control(body) is False


# --- SSE -----------------------------------------------------------------------------------------
STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"model":"m"}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b": a comment\n\n"
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"a\\nb"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def test_parse_whole_stream() -> None:
    events = sse.SSEParser().feed(STREAM)
    assert [e.name for e in events] == [
        "message_start",
        "ping",
        "content_block_delta",
        "message_stop",
    ]
    assert orjson.loads(events[2].data)["delta"]["text"] == "a\nb"
    assert b"".join(e.raw for e in events) == STREAM.replace(b": a comment\n\n", b"")


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    parser = sse.SSEParser()
    events = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(STREAM)]:
        events += parser.feed(STREAM[previous:cut])
        previous = cut
    assert [(e.name, e.data) for e in events] == [
        (e.name, e.data) for e in sse.SSEParser().feed(STREAM)
    ]
    assert parser.pending == b""


@given(
    st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=6),
    st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=8),
)
def test_a_limited_split_keeps_the_rest_for_later(cuts: list[int], limits: list[int]) -> None:
    """Splitting a read only up to the first token (gateway/exchange.py) loses and reorders
    nothing: the events not returned yet come from later calls, `feed(b"")` included."""
    parser = sse.SSEParser()
    events = []
    previous = 0
    for n, cut in enumerate([*sorted(set(cuts)), len(STREAM)]):
        got = parser.feed(STREAM[previous:cut], limits[n % len(limits)])
        assert len(got) <= limits[n % len(limits)]
        events += got
        previous = cut
    events += parser.feed(b"")
    assert [(e.name, e.data) for e in events] == [
        (e.name, e.data) for e in sse.SSEParser().feed(STREAM)
    ]
    assert parser.pending == b""


def test_a_limited_split_returns_at_most_the_limit() -> None:
    parser = sse.SSEParser()
    first = parser.feed(STREAM, 2)
    assert [e.name for e in first] == [e.name for e in sse.SSEParser().feed(STREAM)[:2]]
    assert parser.pending  # the rest is kept, not split yet


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends(newline: bytes) -> None:
    events = sse.SSEParser().feed(STREAM.replace(b"\n", newline))
    assert [e.name for e in events] == [
        "message_start",
        "ping",
        "content_block_delta",
        "message_stop",
    ]


def test_multiline_data_and_missing_space() -> None:
    events = sse.SSEParser().feed(b'event:x\ndata:{"a":\ndata: 1}\n\n')
    assert events[0].name == "x" and orjson.loads(events[0].data) == {"a": 1}


def test_frame_has_event_line_matching_type() -> None:
    framed = sse.frame("message_start", {"type": "message_start", "message": {"model": "é"}})
    assert framed.startswith(b"event: message_start\ndata: {")
    assert framed.endswith(b"\n\n")
    (event,) = sse.SSEParser().feed(framed)
    assert orjson.loads(event.data)["message"]["model"] == "é"


def test_error_event_shape() -> None:
    (event,) = sse.SSEParser().feed(sse.error_event("overloaded_error", "Overloaded", "req_1"))
    assert event.name == "error"
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_1",
    }


def test_ping_event_is_an_event_the_sdk_skips() -> None:
    (event,) = sse.SSEParser().feed(sse.PING_EVENT)
    assert event.name == "ping" and orjson.loads(event.data) == {"type": "ping"}


@pytest.mark.parametrize(
    "block",
    [
        b'event: content_block_delta\ndata: {"type":"content_block_delta"}',
        b'event: message_stop\ndata: {"type":"message_stop"}',
        b"event: x\nid: 7\ndata: {}",  # another field between: the general path
        b"event: x\ndata: {}\ndata: []",  # multi-line data
        b"event: x\ndata: ",  # empty data
        b"event: \ndata: {}",  # empty name
        b"event: x\ndata:{}",  # no space after the colon
        b": comment\nevent: x\ndata: {}",
        b"data: {}\nevent: x",
        b"event: x",
    ],
)
def test_fast_path_parses_as_the_line_loop(block: bytes) -> None:
    """The shape providers send is split without the line loop; every block parses the same."""
    expected = sse._parse_block(block)
    got = sse.SSEParser().feed(block + b"\n\n")
    assert [(e.name, e.data, e.raw) for e in got] == (
        [(expected.name, expected.data, expected.raw)] if expected else []
    )
