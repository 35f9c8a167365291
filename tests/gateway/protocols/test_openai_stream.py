"""Messages stream events -> chat.completion.chunk SSE: table-driven cases and speed.

Properties (streamed == non-streamed, role/id/name once) are in test_openai_stream_props.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.protocols.openai.outbound import map_usage
from gateway.protocols.openai.stream import ChatStreamTranslator

from .openai_stream_helpers import (
    ENVELOPE,
    MESSAGE_STOP,
    PING,
    ROLE,
    block_start,
    delta,
    deltas,
    feed_all,
    json_delta,
    message_delta,
    parse_sse,
    start,
    stop,
    text_delta,
    translator,
)

# -- table-driven -----------------------------------------------------------------------------


def test_text_stream() -> None:
    t = translator()
    assert not t.started
    events = [
        start(),
        block_start(0, {"type": "text", "text": ""}),
        PING,
        text_delta(0, "Hel"),
        text_delta(0, ""),
        text_delta(0, 'lo "world" ✓\n'),
        stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    chunks = feed_all(t, events)
    assert all({k: c[k] for k in ENVELOPE} == ENVELOPE for c in chunks)
    assert all(
        c["choices"][0]["index"] == 0 and c["choices"][0]["logprobs"] is None for c in chunks
    )
    assert deltas(chunks) == [
        (ROLE, None),
        ({"content": "Hel"}, None),
        ({"content": 'lo "world" ✓\n'}, None),
        ({}, "stop"),
    ]
    assert (t.started, t.finished, t.stop_reason) == (True, True, "end_turn")
    assert t.output_chars == len('Hello "world" ✓\n')


def test_tool_calls_count_tool_blocks_only() -> None:
    events = [
        start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="I should "),
        delta(0, type="thinking_delta", thinking="call tools."),
        delta(0, type="signature_delta", signature="sig-1"),
        stop(0),
        block_start(1, {"type": "text", "text": ""}),
        text_delta(1, "Checking."),
        stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
        json_delta(2, ""),
        json_delta(2, '{"city": '),
        json_delta(2, '"Oslo"}'),
        stop(2),
        block_start(3, {"type": "redacted_thinking", "data": "opaque"}),
        stop(3),
        block_start(4, {"type": "tool_use", "id": "toolu_b", "name": "noop", "input": {}}),
        stop(4),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]
    t = translator()
    assert deltas(feed_all(t, events)) == [
        (ROLE, None),
        ({"content": "Checking."}, None),
        (
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "toolu_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            },
            None,
        ),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}, None),
        (
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "toolu_b",
                        "type": "function",
                        "function": {"name": "noop", "arguments": ""},
                    }
                ]
            },
            None,
        ),
        ({}, "tool_calls"),
    ]
    thinking = [
        {"type": "thinking", "thinking": "I should call tools.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
    assert t.thinking_blocks_by_tool_id == {"toolu_a": thinking, "toolu_b": thinking}
    assert t.output_chars == len("I should call tools.") + len("Checking.") + len(
        '{"city": "Oslo"}'
    )


FINISH = [
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("pause_turn", "stop"),
    ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"),
    ("tool_use", "tool_calls"),
    ("refusal", "content_filter"),
    ("brand_new_reason", "stop"),
]


@pytest.mark.parametrize(("stop_reason", "finish"), FINISH, ids=[s for s, _ in FINISH])
def test_finish_reason(stop_reason: str, finish: str) -> None:
    t = translator()
    chunks = feed_all(t, [start(), message_delta(stop_reason), MESSAGE_STOP])
    assert deltas(chunks) == [(ROLE, None), ({}, finish)]
    assert t.stop_reason == stop_reason


# (id, events after message_start, expected deltas after the role chunk)
EDGE_CASES: list[tuple[str, list[dict[str, Any]], list[tuple[dict[str, Any], str | None]]]] = [
    (
        "ignored-events",
        [
            PING,
            {"type": "error", "error": {"type": "overloaded_error"}},
            {"type": "brand_new"},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta"}},
        ],
        [],
    ),
    ("delta-without-stop-reason-then-stop", [message_delta(None), MESSAGE_STOP], [({}, "stop")]),
    (
        "only-one-finish-chunk",
        [message_delta("max_tokens"), message_delta("end_turn"), MESSAGE_STOP],
        [({}, "length")],
    ),
    (
        "text-in-block-start",
        [block_start(0, {"type": "text", "text": "Hi"}), stop(0)],
        [({"content": "Hi"}, None)],
    ),
    (
        "tool-input-given-whole-in-start",
        [block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}), stop(0)],
        [
            (
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "t",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                },
                None,
            ),
            ({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}, None),
        ],
    ),
    (
        "streamed-input-wins-over-start-input",
        [
            block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}),
            json_delta(0, "{}"),
            stop(0),
        ],
        [
            (
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "t",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                },
                None,
            ),
            ({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, None),
        ],
    ),
    ("json-delta-for-unknown-block", [json_delta(7, "{}"), json_delta("x", "{}")], []),  # type: ignore[arg-type]
    (
        "server-tool-blocks-ignored",
        [
            block_start(
                0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
            ),
            json_delta(0, '{"q": 1}'),
            stop(0),
        ],
        [],
    ),
]


@pytest.mark.parametrize(
    ("events", "expected"), [pytest.param(e, x, id=i) for i, e, x in EDGE_CASES]
)
def test_edge_cases(
    events: list[dict[str, Any]], expected: list[tuple[dict[str, Any], str | None]]
) -> None:
    t = translator()
    assert t.feed(start()) != b""
    assert deltas(feed_all(t, events)) == expected


def test_role_chunk_even_without_message_start() -> None:
    t = translator()
    chunks = feed_all(t, [text_delta(0, "x"), MESSAGE_STOP])
    assert deltas(chunks) == [(ROLE, None), ({"content": "x"}, None), ({}, "stop")]
    assert t.feed(start()) == b""  # a late message_start never repeats the role


def test_usage_accumulates_cumulative_counters() -> None:
    t = translator(include_usage=True)
    assert t.usage_chunk() != b""  # available even before the end (zeros)
    t.feed(
        start(
            {
                "input_tokens": 12,
                "cache_creation_input_tokens": 1000,
                "cache_read_input_tokens": 3000,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 1000,
                    "ephemeral_1h_input_tokens": 0,
                },
                "output_tokens": 1,
                "service_tier": "standard",
            }
        )
    )
    t.feed(message_delta("end_turn", output_tokens=40))
    t.feed(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {
                "output_tokens": 55,
                "input_tokens": 12,
                "cache_read_input_tokens": None,
                "cache_creation": {
                    "ephemeral_1h_input_tokens": 0,
                    "ephemeral_5m_input_tokens": None,
                },
                "output_tokens_details": {"thinking_tokens": 30},
            },
        }
    )
    t.feed(MESSAGE_STOP)
    assert t.usage == {
        "input_tokens": 12,
        "output_tokens": 55,
        "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 1000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "output_tokens_details": {"thinking_tokens": 30},
    }
    (chunk,) = parse_sse(t.usage_chunk())
    assert chunk == {**ENVELOPE, "choices": [], "usage": map_usage(t.usage)}
    assert chunk["usage"]["prompt_tokens"] == 4012
    assert chunk["usage"]["completion_tokens_details"] == {"reasoning_tokens": 30}


def test_usage_chunk_only_when_asked() -> None:
    t = translator(include_usage=False)
    feed_all(t, [start(), message_delta("end_turn"), MESSAGE_STOP])
    assert t.usage_chunk() == b""
    assert t.usage["output_tokens"] == 5  # still tracked for billing


def test_constants_and_error_chunk() -> None:
    assert ChatStreamTranslator.DONE == b"data: [DONE]\n\n"
    assert ChatStreamTranslator.PING == b": ping\n\n"
    t = translator()
    raw = t.error_chunk("Overloaded", "server_error", "overloaded")
    assert parse_sse(raw) == [
        {
            "error": {
                "message": "Overloaded",
                "type": "server_error",
                "param": None,
                "code": "overloaded",
            }
        }
    ]
    assert parse_sse(t.error_chunk('bad "x"', "api_error", None))[0]["error"]["code"] is None
    assert parse_sse(t.PING + t.DONE) == ["[DONE]"]


def test_envelope_values_are_escaped() -> None:
    t = translator(request_id='r"1', model_name='we"ird\\model ✓', created=5)
    (chunk,) = feed_all(t, [start()])
    assert (chunk["id"], chunk["model"], chunk["created"]) == ('chatcmpl-r"1', 'we"ird\\model ✓', 5)


# -- speed ------------------------------------------------------------------------------------


def test_cpu_per_event_is_below_50_microseconds() -> None:
    events = [start()]
    events.append(block_start(0, {"type": "text", "text": ""}))
    events.extend(text_delta(0, f"token {i} ") for i in range(3000))
    events.append(stop(0))
    events.append(block_start(1, {"type": "tool_use", "id": "t", "name": "f", "input": {}}))
    events.extend(json_delta(1, '{"k": "v"}'[i % 5 : i % 5 + 2]) for i in range(1000))
    events += [stop(1), message_delta("tool_use"), MESSAGE_STOP]
    best = float("inf")
    for _ in range(5):  # best of 5: measure the code, not a noisy neighbour
        t = translator(include_usage=True)
        began = time.process_time()
        for event in events:
            t.feed(event)
        t.usage_chunk()
        best = min(best, (time.process_time() - began) / len(events))
    assert best < 50e-6, f"{best * 1e6:.1f} µs per event"
