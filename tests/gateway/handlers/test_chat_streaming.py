"""Streamed chat completions: the wire shape (raw SSE), the openai SDK's view of it (create with
stream=True, the stream() helper with tools), keep-alive pings, mid-stream errors, early close."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.chat_support import (
    OPUS_46,
    SONNET,
    SONNET_5,
    TIME_TOOL,
    WEATHER_TOOL,
    RawStream,
    chat_url,
    client,
    stream_raw,
    upstream,
)
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

HELLO = {"model": SONNET, "max_tokens": 200, "messages": [{"role": "user", "content": "Hello"}]}
LONG = {
    "model": SONNET,
    "max_tokens": 1000,
    "messages": [{"role": "user", "content": "a long answer please"}],
}
TOOLS_BOTH = {
    "model": SONNET,
    "max_tokens": 500,
    "tools": [WEATHER_TOOL, TIME_TOOL],
    "messages": [{"role": "user", "content": "Weather and time in Oslo, both please"}],
}


def choice_chunks(stream: RawStream) -> list[dict[str, Any]]:
    return [c for c in stream.chunks if c.get("choices")]


def assert_wire_rules(stream: RawStream, model: str) -> None:
    """Rules every chat stream follows, whatever it carries."""
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    rid = stream.headers["x-request-id"]
    assert stream.headers["request-id"] == rid
    for line in stream.lines:
        # Only data lines and comments: an `id:` line would make the openai SDK choke later.
        assert line == "" or line.startswith(("data: ", ":")), line
    assert stream.data[-1] == "[DONE]" and stream.data.count("[DONE]") == 1
    for chunk in stream.chunks:
        if "error" in chunk:
            continue
        assert chunk["id"] == "chatcmpl-" + rid
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["model"] == model
        assert isinstance(chunk["created"], int)
    chunks = choice_chunks(stream)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # role is sent once: the SDK's helper would otherwise accumulate "assistantassistant".
    assert sum("role" in c["choices"][0]["delta"] for c in chunks) == 1


@pytest.mark.parametrize("include_usage", [True, False])
def test_text_stream_shape(e2e: Stack, include_usage: bool) -> None:
    key = e2e.new_key()
    body = {**HELLO, "model": "Sonnet"}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    stream = stream_raw(e2e, key, body)
    assert_wire_rules(stream, "Sonnet")
    chunks = choice_chunks(stream)
    middle, last = chunks[1:-1], chunks[-1]
    assert len(middle) >= 2  # the simulator sends text in several deltas
    for chunk in middle:
        (choice,) = chunk["choices"]
        assert set(choice["delta"]) == {"content"}
        assert choice["finish_reason"] is None and choice["logprobs"] is None
    assert "".join(c["choices"][0]["delta"]["content"] for c in middle) == (
        "Simulated reply to: Hello"
    )
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "stop"
    usage_chunks = [c for c in stream.chunks if c["choices"] == []]
    if include_usage:
        # The usage chunk is the very last one before [DONE].
        assert usage_chunks == [stream.chunks[-1]]
        usage = usage_chunks[0]["usage"]
        assert usage["completion_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    else:
        assert usage_chunks == []
        assert all(c.get("usage") is None for c in stream.chunks)


def test_tool_call_stream_sends_id_and_name_once(e2e: Stack) -> None:
    key = e2e.new_key()
    stream = stream_raw(e2e, key, TOOLS_BOTH)
    assert_wire_rules(stream, SONNET)
    deltas = [
        call
        for c in choice_chunks(stream)
        for call in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    by_index: dict[int, list[dict[str, Any]]] = {}
    for call in deltas:
        assert "function" in call  # the SDK's helper asserts on it
        by_index.setdefault(call["index"], []).append(call)
    assert sorted(by_index) == [0, 1]  # tool calls counted from 0, not Anthropic block indexes
    arguments = {}
    for calls in by_index.values():
        head, rest = calls[0], calls[1:]
        assert head["id"].startswith("toolu_") and head["type"] == "function"
        assert head["function"]["arguments"] == ""
        assert len(rest) >= 2  # arguments arrive in pieces
        for piece in rest:
            assert set(piece) == {"index", "function"}
            assert set(piece["function"]) == {"arguments"}
        arguments[head["function"]["name"]] = json.loads(
            "".join(p["function"]["arguments"] for p in rest)
        )
    assert set(arguments) == {"get_weather", "get_time"}
    assert all("city" in a for a in arguments.values())
    assert choice_chunks(stream)[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }


def test_done_is_sent_after_usage_is_recorded(e2e: Stack) -> None:
    key = e2e.new_key()
    seen_done = False
    with httpx.stream(
        "POST",
        chat_url(e2e),
        headers={"authorization": f"Bearer {key.secret}"},
        json={**HELLO, "stream": True},
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            if line == "data: [DONE]":
                # Checked before reading on: the record must already be there.
                records = e2e.usage(org_id=key.org_id)
                assert len(records) == 1 and records[0].stream is True
                seen_done = True
    assert seen_done


def test_sdk_stream_with_include_usage_matches_non_streamed(e2e: Stack) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    params: dict[str, Any] = {**HELLO, "extra_headers": {"x-ezat-cache": "off"}}
    whole = api.chat.completions.create(**params)
    text, usage, finish = [], None, None
    for chunk in api.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **params
    ):
        assert chunk.id.startswith("chatcmpl-") and chunk.id != whole.id
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(text) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason == "stop"
    assert usage == whole.usage


def test_sdk_stream_without_include_usage_has_no_usage(e2e: Stack) -> None:
    key = e2e.new_key()
    chunks = list(client(e2e, key).chat.completions.create(stream=True, **HELLO))
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Simulated reply to: Hello"


@pytest.mark.parametrize(
    ("params", "names"),
    [
        (TOOLS_BOTH, ["get_weather", "get_time"]),
        ({**TOOLS_BOTH, "parallel_tool_calls": False}, ["get_weather"]),
        (
            {
                **TOOLS_BOTH,
                "model": SONNET_5,  # Sonnet 5.5 refuses a forced tool choice
                "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                "parallel_tool_calls": False,
            },
            ["get_time"],
        ),
    ],
)
def test_stream_helper_accumulates_intact_tool_calls(
    e2e: Stack, params: dict[str, Any], names: list[str]
) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    # x-ezat-cache off on both, so cache accounting cannot make the two answers differ.
    headers = {"x-ezat-cache": "off"}
    whole = api.chat.completions.create(extra_headers=headers, **params)
    with api.chat.completions.stream(extra_headers=headers, **params) as events:
        names_seen = [e.name for e in events if e.type == "tool_calls.function.arguments.done"]
        final = events.get_final_completion()
    message = final.choices[0].message
    assert message.role == "assistant"
    assert final.choices[0].finish_reason == "tool_calls"
    # The helper concatenates repeated strings: intact ids and names prove they came once.
    assert [c.function.name for c in message.tool_calls] == names == names_seen
    expected = whole.choices[0].message.tool_calls
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
    ] == [(c.id, c.function.name, json.loads(c.function.arguments)) for c in expected]


def test_stream_helper_text_matches_non_streamed(e2e: Stack) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    whole = api.chat.completions.create(**LONG)
    with api.chat.completions.stream(**LONG) as events:
        pieces = [e.delta for e in events if e.type == "content.delta"]
        final = events.get_final_completion()
    assert len(pieces) > 10
    assert final.choices[0].message.content == whole.choices[0].message.content
    assert final.choices[0].message.role == "assistant"
    assert final.choices[0].message.content.startswith("Simulated long reply to:")


# -- keep-alives, failures, early close -------------------------------------------------------


@pytest.mark.parametrize(
    ("pause_after_events", "pause"),
    [
        (4, 2.5),  # after the first token: the gateway's own pings fill the silence
        (1, 2.2),  # before the first token: the stream opens after 1.5 s with a ping
    ],
)
def test_pings_during_upstream_pause(e2e: Stack, pause_after_events: int, pause: float) -> None:
    key = e2e.new_key()
    e2e.sim.script({"pause_after_events": pause_after_events, "pause": pause})
    stream = stream_raw(e2e, key, {**LONG, "stream_options": {"include_usage": True}})
    assert_wire_rules(stream, SONNET)
    assert ": ping" in stream.lines
    first_data = next(i for i, line in enumerate(stream.lines) if line.startswith("data: "))
    if pause_after_events == 1:
        assert ": ping" in stream.lines[:first_data]
    else:
        assert ": ping" in stream.lines[first_data:]
    assert stream.chunks[-1]["usage"]["completion_tokens"] > 0
    # The SDK skips the comments and gets the whole answer.
    e2e.sim.script({"pause_after_events": pause_after_events, "pause": pause})
    chunks = list(client(e2e, key).chat.completions.create(stream=True, **LONG))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.startswith("Simulated long reply to:") and text.endswith(".")


def test_mid_stream_error_wire(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"error_after_events": 8})
    stream = stream_raw(e2e, key, {**LONG, "stream_options": {"include_usage": True}})
    assert_wire_rules(stream, SONNET)
    assert stream.data[-1] == "[DONE]"
    error = json.loads(stream.data[-2])
    assert set(error) == {"error"}
    assert error["error"]["message"] == "Overloaded"
    assert set(error["error"]) == {"message", "type", "param", "code"}
    # Content came first; then no finish chunk and no usage chunk.
    assert any(c["choices"][0]["delta"].get("content") for c in choice_chunks(stream))
    assert all(c["choices"][0]["finish_reason"] is None for c in choice_chunks(stream))
    assert not any(c.get("choices") == [] for c in stream.chunks)
    # The output delivered before the error is billed, marked as a failed stream.
    (record,) = e2e.usage(org_id=key.org_id)
    assert (record.status, record.output_exact) == ("stream_failed", False)


def test_mid_stream_error_sdk_raises_api_error_and_bills_the_output_so_far(e2e: Stack) -> None:
    key = e2e.new_key()
    e2e.sim.script({"error_after_events": 8})
    received: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in client(e2e, key).chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **LONG
        ):
            received.append(chunk.choices[0].delta.content or "")
    assert not isinstance(raised.value, openai.APIStatusError)  # no status: the stream was 200
    assert raised.value.message == "Overloaded"
    assert "".join(received).startswith("Simulated")
    (record,) = e2e.usage(org_id=key.org_id)
    assert record.status == "stream_failed"
    assert record.output_tokens == max(1, -(-len("".join(received)) // 4))


def test_early_close_is_billed_with_estimated_output(e2e: Stack) -> None:
    key = e2e.new_key()
    # Slow enough that the gateway's 3 s drain ends before the upstream's final usage.
    e2e.sim.script({"event_delay": 0.2})
    stream = client(e2e, key).chat.completions.create(stream=True, **LONG)
    for n, _chunk in enumerate(stream):
        if n == 3:
            break
    stream.close()
    (record,) = wait_for(
        lambda: e2e.usage(org_id=key.org_id), 60, what="the usage record after the client closed"
    )
    assert record.status == "client_disconnected"
    assert record.output_exact is False
    assert record.output_tokens > 0 and record.cost_nano > 0


def test_streamed_reasoning_reports_effort_and_hides_thinking(e2e: Stack) -> None:
    key = e2e.new_key()
    stream = stream_raw(
        e2e,
        key,
        {
            "model": OPUS_46,
            "max_completion_tokens": 2000,
            "reasoning_effort": "xhigh",
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        },
    )
    assert_wire_rules(stream, OPUS_46)
    assert stream.headers["x-ezat-reasoning-effort"] == "high"
    assert "Thinking about" not in stream.text
    usage = stream.chunks[-1]["usage"]
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] < usage["completion_tokens"]
    sent = upstream(e2e)
    assert sent["thinking"] == {"type": "adaptive"} and sent["output_config"] == {"effort": "high"}
