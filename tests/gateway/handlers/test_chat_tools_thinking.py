"""Tools, tool_choice, reasoning_effort and thinking with tools through the openai SDK: what the
client gets and what the upstream simulator received."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.chat_support import (
    HAIKU,
    NO_CACHE,
    OPUS_46,
    SONNET,
    SONNET_5,
    TIME_TOOL,
    WEATHER_TOOL,
    client,
    error_of,
    upstream,
    upstream_records,
    without_cache_control,
)
from tests.support.stack import Key, Stack

pytestmark = pytest.mark.e2e

ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": WEATHER_TOOL["function"]["parameters"],
}


def ask(e2e: Stack, key: Key | None = None, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    kwargs.setdefault("model", SONNET)
    kwargs.setdefault("max_completion_tokens", 2000)
    kwargs.setdefault("messages", [{"role": "user", "content": "Weather in Oslo?"}])
    completion = client(e2e, key or e2e.new_key()).chat.completions.create(
        extra_headers=NO_CACHE, **kwargs
    )
    return completion, upstream(e2e)


# -- tools and tool_choice --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "tool_choice"),
    [
        ({}, None),
        ({"tool_choice": "auto"}, {"type": "auto"}),
        ({"tool_choice": "required"}, {"type": "any"}),
        ({"tool_choice": "none"}, {"type": "none"}),
        (
            {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
            {"type": "tool", "name": "get_time"},
        ),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        (
            {"tool_choice": "required", "parallel_tool_calls": False},
            {"type": "any", "disable_parallel_tool_use": True},
        ),
        (
            {
                "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                "parallel_tool_calls": False,
            },
            {"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
        ),
        # Nothing to parallelise when no tool may be called.
        ({"tool_choice": "none", "parallel_tool_calls": False}, {"type": "none"}),
        # true is Anthropic's default: nothing needs to be sent.
        ({"parallel_tool_calls": True}, None),
    ],
)
def test_tools_and_tool_choice_mapping(
    e2e: Stack, params: dict[str, Any], tool_choice: dict[str, Any] | None
) -> None:
    completion, body = ask(e2e, model=SONNET_5, tools=[WEATHER_TOOL, TIME_TOOL], **params)
    assert body["tools"] == [
        ANTHROPIC_WEATHER,
        {
            "name": "get_time",
            "description": "Local time in a city",
            "input_schema": TIME_TOOL["function"]["parameters"],
        },
    ]
    assert body.get("tool_choice") == tool_choice
    choice = completion.choices[0]
    if tool_choice == {"type": "none"}:
        assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    else:
        assert choice.finish_reason == "tool_calls"
        expected = "get_time" if tool_choice and tool_choice.get("name") else "get_weather"
        assert [c.function.name for c in choice.message.tool_calls] == [expected]


@pytest.mark.parametrize("params", [{"tool_choice": "required"}, {"parallel_tool_calls": False}])
def test_tool_choice_ignored_without_tools(e2e: Stack, params: dict[str, Any]) -> None:
    completion, body = ask(e2e, **params)
    assert "tool_choice" not in body and "tools" not in body
    assert completion.choices[0].message.content == "Simulated reply to: Weather in Oslo?"


def test_tool_call_response_shape_and_parallel_calls(e2e: Stack) -> None:
    messages = [{"role": "user", "content": "Weather and time in Oslo, both please"}]
    completion, _ = ask(e2e, messages=messages, tools=[WEATHER_TOOL, TIME_TOOL])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    for call in calls:
        assert call.type == "function" and call.id.startswith("toolu_")
        assert "city" in json.loads(call.function.arguments)
    assert len({c.id for c in calls}) == 2
    # parallel_tool_calls false: the simulator then makes a single call.
    single, body = ask(
        e2e, messages=messages, tools=[WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False
    )
    assert body["tool_choice"]["disable_parallel_tool_use"] is True
    assert len(single.choices[0].message.tool_calls) == 1


def test_tool_without_parameters_and_strict_flag(e2e: Stack) -> None:
    tools = [
        {"type": "function", "function": {"name": "ping"}},
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "strict": True,
                "parameters": {
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        },
    ]
    completion, body = ask(e2e, model=SONNET_5, tools=tools, tool_choice="required")
    assert body["tools"][0] == {
        "name": "ping",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert body["tools"][1]["strict"] is True
    assert body["tools"][1]["input_schema"]["type"] == "object"  # OpenAI lets clients omit it
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "ping" and json.loads(call.function.arguments) == {}


def test_sdk_tool_loop_as_documented(e2e: Stack) -> None:
    """The docs' loop: append the SDK's reply object, then one tool message per call."""
    key = e2e.new_key()
    api = client(e2e, key)
    messages: list[Any] = [{"role": "user", "content": "What's the weather in Oslo? Use the tool."}]
    first = api.chat.completions.create(
        model=SONNET, max_tokens=64, messages=messages, tools=[WEATHER_TOOL]
    )
    reply = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    messages.append(reply)
    for call in reply.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "9°C and clear"})
    second = api.chat.completions.create(
        model=SONNET, max_tokens=64, messages=messages, tools=[WEATHER_TOOL]
    )
    assert second.choices[0].message.content == "Tool said: 9°C and clear"
    assert second.choices[0].finish_reason == "stop"
    sent = without_cache_control(upstream(e2e)["messages"])
    call = reply.tool_calls[0]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": call.id,
                "name": "get_weather",
                "input": json.loads(call.function.arguments),
            }
        ],
    }
    assert sent[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "9°C and clear",
    }


# -- reasoning_effort -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "asked", "effective"),
    [
        (SONNET, "low", "low"),
        (SONNET, "medium", "medium"),
        (SONNET, "xhigh", "xhigh"),
        (SONNET, "max", "max"),
        (SONNET, "minimal", "low"),  # no minimal level: the nearest one
        (OPUS_46, "xhigh", "high"),  # between high and max: the tie goes to the lower level
        (OPUS_46, "high", "high"),
    ],
)
def test_reasoning_effort_maps_to_thinking_and_effort(
    e2e: Stack, model: str, asked: str, effective: str
) -> None:
    key = e2e.new_key()
    raw = client(e2e, key).chat.completions.with_raw_response.create(
        model=model,
        max_completion_tokens=2000,
        reasoning_effort=asked,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Why is the sky blue?"}],
    )
    completion = raw.parse()
    assert raw.headers["x-ezat-reasoning-effort"] == effective
    body = upstream(e2e)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": effective}
    assert "reasoning_effort" not in body
    # Thinking is billed and counted, never returned.
    assert completion.choices[0].message.content == "Simulated reply to: Why is the sky blue?"
    assert "Thinking about" not in raw.text
    reasoning = completion.usage.completion_tokens_details.reasoning_tokens
    assert 0 < reasoning < completion.usage.completion_tokens


@pytest.mark.parametrize("model", [SONNET, HAIKU])
def test_reasoning_effort_none_sends_no_thinking(e2e: Stack, model: str) -> None:
    key = e2e.new_key()
    raw = client(e2e, key).chat.completions.with_raw_response.create(
        model=model,
        max_completion_tokens=100,
        reasoning_effort="none",
        messages=[{"role": "user", "content": "hi"}],
    )
    assert raw.headers["x-ezat-reasoning-effort"] == "none"
    body = upstream(e2e)
    assert "thinking" not in body and "output_config" not in body
    assert raw.parse().usage.completion_tokens_details.reasoning_tokens == 0


def test_no_reasoning_effort_no_header_no_thinking(e2e: Stack) -> None:
    key = e2e.new_key()
    raw = client(e2e, key).chat.completions.with_raw_response.create(
        model=SONNET, max_completion_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-ezat-reasoning-effort" not in raw.headers
    assert "thinking" not in upstream(e2e) and "output_config" not in upstream(e2e)


@pytest.mark.parametrize(
    ("model", "levels"),
    [(SONNET, "none, low, medium, high, xhigh, max"), (OPUS_46, "none, low, medium, high, max")],
)
@pytest.mark.parametrize("value", ["ultra", "HIGH"])
def test_unknown_reasoning_effort_is_400_naming_levels(
    e2e: Stack, model: str, levels: str, value: str
) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=model,
            reasoning_effort=value,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "hi"}],
        )
    error = error_of(raised.value)
    assert error["param"] == "reasoning_effort"
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("reasoning_effort: ")
    assert f"supports {levels}" in error["message"]
    assert upstream_records(e2e) == []


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_forced_tool_turns_thinking_off(e2e: Stack, tool_choice: Any) -> None:
    completion, body = ask(
        e2e, model=SONNET_5, tools=[WEATHER_TOOL], tool_choice=tool_choice, reasoning_effort="high"
    )
    assert "thinking" not in body
    assert body["output_config"] == {"effort": "high"}  # effort alone is valid with a forced tool
    assert completion.choices[0].finish_reason == "tool_calls"
    assert upstream_records(e2e)[-1]["status"] == "200"


# -- thinking with tools ----------------------------------------------------------------------


def run_turn(
    e2e: Stack, key: Key, messages: list[Any], *, stream: bool, effort: str = "medium"
) -> Any:
    """One request of a tool loop; the streamed variant goes through the SDK's stream helper."""
    api = client(e2e, key)
    params: dict[str, Any] = {
        "model": SONNET,
        "max_completion_tokens": 2000,
        "messages": messages,
        "tools": [WEATHER_TOOL],
        "reasoning_effort": effort,
    }
    if not stream:
        return api.chat.completions.create(**params)
    with api.chat.completions.stream(**params) as events:
        return events.get_final_completion()


@pytest.mark.parametrize(
    ("first_streamed", "second_streamed"),
    [(False, False), (True, True), (True, False), (False, True)],
)
def test_thinking_tool_loop_sends_signed_thinking_back(
    e2e: Stack, first_streamed: bool, second_streamed: bool
) -> None:
    key = e2e.new_key()
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    first = run_turn(e2e, key, messages, stream=first_streamed)
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.usage is None or first.usage.completion_tokens_details.reasoning_tokens > 0
    call = first.choices[0].message.tool_calls[0]
    # The client sees no thinking at all...
    assert "Thinking about" not in first.model_dump_json()
    messages.append(first.choices[0].message)
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "9°C and clear"})

    second = run_turn(e2e, key, messages, stream=second_streamed)
    assert second.choices[0].message.content == "Tool said: 9°C and clear"

    # ...but the upstream got the signed block back at the start of the tool_use turn, and
    # accepted it (the simulator verifies signatures like the real API).
    record = upstream_records(e2e)[-1]
    assert record["status"] == "200"
    body = record["body"]
    assert body["thinking"] == {"type": "adaptive"}
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds == ["thinking", "tool_use"]
    thinking = assistant["content"][0]
    assert thinking["thinking"].startswith("Thinking about: Weather in Oslo")
    assert thinking["signature"]
    assert assistant["content"][1]["id"] == call.id
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


def test_unknown_tool_call_id_turns_thinking_off(e2e: Stack) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_fabricated_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_fabricated_1", "content": "9°C"},
    ]
    completion = run_turn(e2e, e2e.new_key(), messages, stream=False, effort="high")
    assert completion.choices[0].message.content == "Tool said: 9°C"
    record = upstream_records(e2e)[-1]
    assert record["status"] == "200"
    assert "thinking" not in record["body"]
    assert record["body"]["output_config"] == {"effort": "high"}
    assert record["body"]["messages"][1]["content"][0]["type"] == "tool_use"


def test_thinking_blocks_are_kept_per_org(e2e: Stack) -> None:
    """Another org replaying the same tool call id must not get the first org's blocks."""
    owner, other = e2e.new_key(), e2e.new_key()
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo? Use the tool."}]
    first = run_turn(e2e, owner, messages, stream=False)
    messages.append(first.choices[0].message)
    call_id = first.choices[0].message.tool_calls[0].id
    messages.append({"role": "tool", "tool_call_id": call_id, "content": "9°C"})

    run_turn(e2e, other, messages, stream=False)
    record = upstream_records(e2e)[-1]
    assert record["status"] == "200"
    assert "thinking" not in record["body"]
    assert "signature" not in json.dumps(record["body"])

    run_turn(e2e, owner, messages, stream=False)
    assert upstream(e2e)["messages"][1]["content"][0]["type"] == "thinking"
