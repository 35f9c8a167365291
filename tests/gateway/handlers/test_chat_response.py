"""The chat.completion answer: shape, ids and headers, model echo, finish reasons, usage (with a
cached second turn) and billing parity between streamed and non-streamed runs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from simulator.tokens import estimate_input_tokens
from tests.support.chat_support import (
    NO_CACHE,
    SONNET,
    TIME_TOOL,
    WEATHER_TOOL,
    client,
    post_chat,
    upstream,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

SYSTEM = "You are a meticulous assistant. " * 40


def test_raw_response_shape_and_request_ids(e2e: Stack) -> None:
    key = e2e.new_key()
    before = int(time.time())
    response = post_chat(
        e2e,
        key,
        {"model": SONNET, "max_tokens": 50, "messages": [{"role": "user", "content": "Hello"}]},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    rid = response.headers["x-request-id"]
    assert response.headers["request-id"] == rid
    body = response.json()
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
    assert body["id"] == "chatcmpl-" + rid
    assert body["object"] == "chat.completion"
    assert before <= body["created"] <= int(time.time()) + 1
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Simulated reply to: Hello",
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert set(body["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    }
    # The request id is the usage record's: what support gets quoted is what was billed.
    (record,) = e2e.usage(org_id=key.org_id)
    assert record.request_id == rid and record.api == "chat"


def test_sdk_request_id_and_headers(e2e: Stack) -> None:
    key = e2e.new_key()
    raw = client(e2e, key).chat.completions.with_raw_response.create(
        model=SONNET, max_tokens=50, messages=[{"role": "user", "content": "Hello"}]
    )
    completion = raw.parse()
    assert completion.id == "chatcmpl-" + raw.headers["request-id"]
    assert completion._request_id == raw.headers["x-request-id"]  # what the SDK reports
    assert len(completion.choices) == 1
    assert completion.choices[0].message.refusal is None
    assert completion.choices[0].logprobs is None
    assert int(raw.headers["x-ratelimit-limit-requests"]) == 10_000


@pytest.mark.parametrize(
    "name", ["sonnet", "SONNET", "claude-sonnet-5.5", "Claude-Sonnet-5-5", SONNET, "  sonnet "]
)
def test_model_is_exactly_the_name_sent(e2e: Stack, name: str) -> None:
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(
        model=name, max_tokens=20, messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.model == name
    assert upstream(e2e)["model"] == "claude-sonnet-5-5"
    chunks = list(
        client(e2e, key).chat.completions.create(
            model=name, max_tokens=20, stream=True, messages=[{"role": "user", "content": "hi"}]
        )
    )
    assert {c.model for c in chunks} == {name}
    assert e2e.usage(org_id=key.org_id)[0].model_name == name


# -- finish_reason ----------------------------------------------------------------------------

TOOL_USE_BLOCK = {
    "type": "tool_use",
    "id": "toolu_scripted_1",
    "name": "get_weather",
    "input": {"city": "Oslo"},
}


@pytest.mark.parametrize(
    ("stop_reason", "content", "finish_reason"),
    [
        ("end_turn", [{"type": "text", "text": "Done."}], "stop"),
        ("stop_sequence", [{"type": "text", "text": "Cut here"}], "stop"),
        ("pause_turn", [{"type": "text", "text": "Searching"}], "stop"),
        ("max_tokens", [{"type": "text", "text": "Truncat"}], "length"),
        ("model_context_window_exceeded", [{"type": "text", "text": "Out of"}], "length"),
        ("refusal", [{"type": "text", "text": "I can't help"}], "content_filter"),
        ("tool_use", [TOOL_USE_BLOCK], "tool_calls"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_finish_reason_mapping(
    e2e: Stack, stop_reason: str, content: list[dict[str, Any]], finish_reason: str, stream: bool
) -> None:
    key = e2e.new_key()
    e2e.sim.script({"reply": {"content": content, "stop_reason": stop_reason}})
    params: dict[str, Any] = {
        "model": SONNET,
        "max_tokens": 100,
        "tools": [WEATHER_TOOL],
        "messages": [{"role": "user", "content": "hi"}],
    }
    text = content[0].get("text")
    if not stream:
        completion = client(e2e, key).chat.completions.create(**params)
        choice = completion.choices[0]
        assert choice.finish_reason == finish_reason
        assert choice.message.content == text
        assert choice.message.refusal is None  # a refusal is a finish reason, not a field
        if stop_reason == "tool_use":
            (call,) = choice.message.tool_calls
            assert (call.id, call.function.name) == ("toolu_scripted_1", "get_weather")
            assert call.function.arguments == '{"city":"Oslo"}'
        return
    chunks = list(client(e2e, key).chat.completions.create(stream=True, **params))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finishes == [finish_reason]
    assert chunks[-1].choices[0].finish_reason == finish_reason
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == (text or "")


# -- usage ------------------------------------------------------------------------------------


def test_usage_mapping_with_cached_second_turn(e2e: Stack) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is a prompt cache?"},
    ]
    first = api.chat.completions.create(model=SONNET, max_tokens=100, messages=messages)
    u1 = first.usage
    # Ground truth: the simulator's token count of exactly what it received.
    assert u1.prompt_tokens == estimate_input_tokens(upstream(e2e))
    assert u1.prompt_tokens_details.cached_tokens == 0
    # Turn 1 writes everything up to its newest message (automatic breakpoints).
    assert u1.prompt_tokens_details.cache_write_tokens == u1.prompt_tokens
    assert u1.total_tokens == u1.prompt_tokens + u1.completion_tokens
    assert u1.completion_tokens_details.reasoning_tokens == 0

    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And how long does it last?"},
    ]
    second = api.chat.completions.create(model=SONNET, max_tokens=100, messages=messages)
    u2 = second.usage
    assert u2.prompt_tokens == estimate_input_tokens(upstream(e2e))
    # Turn 2 reads back all of turn 1 and writes only the new part.
    assert u2.prompt_tokens_details.cached_tokens == u1.prompt_tokens
    assert u2.prompt_tokens_details.cache_write_tokens == u2.prompt_tokens - u1.prompt_tokens
    assert u2.total_tokens == u2.prompt_tokens + u2.completion_tokens

    first_record, second_record = e2e.usage(org_id=key.org_id)
    for usage, record in ((u1, first_record), (u2, second_record)):
        cached = usage.prompt_tokens_details.cached_tokens
        written = usage.prompt_tokens_details.cache_write_tokens
        assert record.cache_read_tokens == cached
        assert record.cache_write_5m_tokens == written and record.cache_write_1h_tokens == 0
        assert record.input_tokens == usage.prompt_tokens - cached - written
        assert record.output_tokens == usage.completion_tokens
        # Sonnet 5.5 per million tokens: input $2, cache read $0.20, 5-minute write $2.50,
        # output $10; cost_nano is rounded once, to the nearest nano-dollar.
        micro = (
            record.input_tokens * 2_000_000
            + cached * 200_000
            + written * 2_500_000
            + record.output_tokens * 10_000_000
        )
        assert record.cost_nano == (micro + 500) // 1000


def test_usage_counts_reasoning_tokens_as_output(e2e: Stack) -> None:
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(
        model=SONNET,
        max_completion_tokens=2000,
        reasoning_effort="high",
        messages=[{"role": "user", "content": "Think first, then answer."}],
        extra_headers=NO_CACHE,
    )
    usage = completion.usage
    (record,) = e2e.usage(org_id=key.org_id)
    assert usage.completion_tokens_details.reasoning_tokens == record.reasoning_tokens > 0
    assert usage.completion_tokens == record.output_tokens > record.reasoning_tokens
    assert usage.prompt_tokens == record.input_tokens
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.prompt_tokens_details.cache_write_tokens == 0


# -- billing parity ---------------------------------------------------------------------------

EXCHANGES: dict[str, dict[str, Any]] = {
    "text": {"messages": [{"role": "user", "content": "a long answer please"}]},
    "system+cache": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hello there"},
        ]
    },
    "tools": {
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "messages": [{"role": "user", "content": "Weather and time in Oslo, both please"}],
    },
    "reasoning": {
        "reasoning_effort": "medium",
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
    },
    "stop": {"stop": ["gateway"], "messages": [{"role": "user", "content": "a long answer"}]},
}

COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
    "cost_nano",
    "output_exact",
    "status",
)


@pytest.mark.parametrize("name", list(EXCHANGES))
def test_streamed_and_non_streamed_bill_the_same(e2e: Stack, name: str) -> None:
    key = e2e.new_key()
    api = client(e2e, key)
    params = {"model": SONNET, "max_completion_tokens": 2000, **EXCHANGES[name]}
    whole = api.chat.completions.create(**params)
    e2e.reset_sims()  # a fresh prompt cache: the streamed run must write it again, like the first
    usage = None
    for chunk in api.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **params
    ):
        usage = chunk.usage or usage
    assert usage == whole.usage
    plain, streamed = e2e.usage(org_id=key.org_id)
    assert (plain.stream, streamed.stream) == (False, True)
    assert [getattr(streamed, c) for c in COLUMNS] == [getattr(plain, c) for c in COLUMNS]
    assert plain.cost_nano > 0
