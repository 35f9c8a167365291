"""Messages reply -> chat.completion (table-driven)."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from gateway.protocols.openai.outbound import (
    map_usage,
    thinking_blocks_by_tool_id,
    translate_response,
)

USAGE = {
    "input_tokens": 14,
    "output_tokens": 21,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    "service_tier": "standard",
}
THINK = {"type": "thinking", "thinking": "Hmm.", "signature": "sig"}
REDACTED = {"type": "redacted_thinking", "data": "opaque"}


def reply(content: list[dict[str, Any]], stop_reason: str | None = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream-id",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": USAGE,
    }


def tool_use(tool_id: str, name: str, tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def translate(msg: dict[str, Any]) -> dict[str, Any]:
    return translate_response(
        msg, request_id="req_abc", model_name="anthropic/Claude-Sonnet-5-5", created=1793318400
    )


def test_envelope() -> None:
    out = translate(reply([{"type": "text", "text": "A prompt cache stores…"}]))
    assert out == {
        "id": "chatcmpl-req_abc",
        "object": "chat.completion",
        "created": 1793318400,
        "model": "anthropic/Claude-Sonnet-5-5",  # exactly as the client sent it
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "A prompt cache stores…",
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 14,
            "completion_tokens": 21,
            "total_tokens": 35,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


FINISH = [
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("pause_turn", "stop"),
    ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"),
    ("tool_use", "tool_calls"),
    ("refusal", "content_filter"),
    ("compaction", "stop"),
    ("something_new", "stop"),
    (None, "stop"),
]


@pytest.mark.parametrize(("stop_reason", "finish"), FINISH, ids=[str(s) for s, _ in FINISH])
def test_finish_reason(stop_reason: str | None, finish: str) -> None:
    out = translate(reply([{"type": "text", "text": "x"}], stop_reason))
    assert out["choices"][0]["finish_reason"] == finish


# (id, Anthropic content, expected content, expected tool_calls or None)
CONTENT: list[tuple[str, list[dict[str, Any]], str | None, list[dict[str, Any]] | None]] = [
    ("no-blocks", [], None, None),
    (
        "texts-concatenated",
        [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}],
        "Hello",
        None,
    ),
    ("empty-text-block", [{"type": "text", "text": ""}], "", None),
    ("thinking-never-returned", [THINK, REDACTED, {"type": "text", "text": "42"}], "42", None),
    (
        "tool-only",
        [THINK, tool_use("toolu_1", "get_weather", {"city": "Oslo"})],
        None,
        [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    ),
    (
        "text-then-tools",
        [
            {"type": "text", "text": "Checking."},
            tool_use("toolu_1", "f", {}),
            tool_use("toolu_2", "g", {"nested": {"list": [1, 2.5, None, True]}, "ü": "ø"}),
        ],
        "Checking.",
        [
            {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {
                "id": "toolu_2",
                "type": "function",
                "function": {
                    "name": "g",
                    "arguments": '{"nested":{"list":[1,2.5,null,true]},"ü":"ø"}',
                },
            },
        ],
    ),
    (
        "server-tool-blocks-skipped",
        [
            {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}},
            {"type": "text", "text": "ok"},
        ],
        "ok",
        None,
    ),
]


@pytest.mark.parametrize(
    ("content", "text", "tool_calls"), [pytest.param(*c[1:], id=c[0]) for c in CONTENT]
)
def test_content(
    content: list[dict[str, Any]], text: str | None, tool_calls: list[dict[str, Any]] | None
) -> None:
    message = translate(reply(content, "tool_use" if tool_calls else "end_turn"))["choices"][0][
        "message"
    ]
    assert message["content"] == text
    assert message["refusal"] is None
    assert message.get("tool_calls") == tool_calls
    assert ("tool_calls" in message) == (tool_calls is not None)
    for call in tool_calls or ():
        # Arguments are a JSON string the client can parse back into the same input.
        assert isinstance(orjson.loads(call["function"]["arguments"]), dict)


# (id, Anthropic usage, expected OpenAI usage)
USAGES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "empty",
        {},
        {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    ),
    (
        "plain",
        {"input_tokens": 27, "output_tokens": 20},
        {
            "prompt_tokens": 27,
            "completion_tokens": 20,
            "total_tokens": 47,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    ),
    (
        "cache-read-and-write-count-as-prompt",
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 3000,
            "cache_creation_input_tokens": 500,
            "output_tokens": 7,
        },
        {
            "prompt_tokens": 3510,
            "completion_tokens": 7,
            "total_tokens": 3517,
            "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 500},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    ),
    (
        "thinking-tokens",
        {"input_tokens": 5, "output_tokens": 100, "output_tokens_details": {"thinking_tokens": 80}},
        {
            "prompt_tokens": 5,
            "completion_tokens": 100,
            "total_tokens": 105,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 80},
        },
    ),
    (
        "nulls-are-zero",
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": None,
            "output_tokens_details": None,
        },
        {
            "prompt_tokens": 5,
            "completion_tokens": 1,
            "total_tokens": 6,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    ),
]


@pytest.mark.parametrize(("usage", "expected"), [pytest.param(u, e, id=i) for i, u, e in USAGES])
def test_map_usage(usage: dict[str, Any], expected: dict[str, Any]) -> None:
    assert map_usage(usage) == expected


def test_missing_usage_maps_to_zeros() -> None:
    msg = reply([{"type": "text", "text": "x"}])
    del msg["usage"]
    assert translate(msg)["usage"]["total_tokens"] == 0


# (id, content, expected map)
THINKING_MAPS: list[tuple[str, list[dict[str, Any]], dict[str, list[dict[str, Any]]]]] = [
    ("no-tools", [THINK, {"type": "text", "text": "x"}], {}),
    ("no-thinking", [tool_use("t1", "f", {})], {}),
    ("one-tool", [THINK, tool_use("t1", "f", {})], {"t1": [THINK]}),
    (
        "every-tool-gets-all-blocks-in-order",
        [
            THINK,
            REDACTED,
            {"type": "text", "text": "x"},
            tool_use("t1", "f", {}),
            tool_use("t2", "g", {}),
        ],
        {"t1": [THINK, REDACTED], "t2": [THINK, REDACTED]},
    ),
    (
        "output-only-fields-dropped",
        [
            {**THINK, "citations": None, "extra": 1},
            {**REDACTED, "extra": 2},
            tool_use("t1", "f", {}),
        ],
        {"t1": [THINK, REDACTED]},
    ),
]


@pytest.mark.parametrize(
    ("content", "expected"), [pytest.param(c, e, id=i) for i, c, e in THINKING_MAPS]
)
def test_thinking_blocks_by_tool_id(
    content: list[dict[str, Any]], expected: dict[str, list[dict[str, Any]]]
) -> None:
    result = thinking_blocks_by_tool_id(content)
    assert result == expected
    # Lists are independent, so the caller may mutate one entry safely.
    lists = list(result.values())
    assert all(a is not b for a, b in itertools.pairwise(lists))
