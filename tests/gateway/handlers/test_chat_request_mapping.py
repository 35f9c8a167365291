"""Chat Completions request -> Messages request, seen from both ends: the openai SDK's answer and
the body the upstream simulator received (messages, output limits, stop, sampling, JSON output,
ignored fields)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pydantic
import pytest

from tests.support.chat_support import (
    ANTHROPIC_KEYS,
    HAIKU,
    NO_CACHE,
    OPUS_46,
    SONNET,
    SONNET_46,
    WEATHER_TOOL,
    client,
    error_of,
    upstream,
    upstream_records,
    without_cache_control,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

SMALL_MODEL = "test/chat-small-output"
SMALL_MAX_OUTPUT = 8192


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def send(e2e: Stack, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """One non-streamed request with caching off (markers would clutter body comparisons)."""
    key = e2e.new_key()
    kwargs.setdefault("model", SONNET)
    kwargs.setdefault("max_completion_tokens", 64)
    completion = client(e2e, key).chat.completions.create(extra_headers=NO_CACHE, **kwargs)
    return completion, upstream(e2e)


# -- messages ---------------------------------------------------------------------------------


def test_system_and_developer_hoisted_into_system_in_order(e2e: Stack) -> None:
    completion, body = send(
        e2e,
        messages=[
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": "First answer"},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": "Second question"},
        ],
    )
    assert body["system"] == [text("Be terse."), text("Use metric units.")]
    assert body["messages"] == [
        {"role": "user", "content": [text("First question")]},
        {"role": "assistant", "content": [text("First answer")]},
        {"role": "user", "content": [text("Second question")]},
    ]
    assert completion.choices[0].message.content == "Simulated reply to: Second question"


def test_tool_calls_and_tool_results_map_to_tool_use_and_results_first(e2e: Stack) -> None:
    completion, body = send(
        e2e,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Oslo and Bergen?"},
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "call_oslo",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "call_bergen",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    },
                ],
            },
            # A user note between the tool results: the results still come first in the turn.
            {"role": "tool", "tool_call_id": "call_oslo", "content": "9°C and clear"},
            {"role": "user", "content": "Bergen is usually rainy."},
            {"role": "tool", "tool_call_id": "call_bergen", "content": [text("12°C, rain")]},
        ],
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            text("Checking both."),
            {
                "type": "tool_use",
                "id": "call_oslo",
                "name": "get_weather",
                "input": {"city": "Oslo"},
            },
            # Empty arguments become an empty object: Anthropic needs an object.
            {"type": "tool_use", "id": "call_bergen", "name": "get_weather", "input": {}},
        ],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_oslo", "content": "9°C and clear"},
            {"type": "tool_result", "tool_use_id": "call_bergen", "content": [text("12°C, rain")]},
            text("Bergen is usually rainy."),
        ],
    }
    assert len(body["messages"]) == 3
    assert completion.choices[0].message.content == "Tool said: 9°C and clear"


def test_consecutive_same_role_messages_merged(e2e: Stack) -> None:
    _, body = send(
        e2e,
        messages=[
            {"role": "user", "content": "one"},
            {"role": "user", "content": [text("two"), text("three")]},
            {"role": "assistant", "content": "four"},
            {"role": "assistant", "content": "five"},
            {"role": "user", "content": "six"},
        ],
    )
    assert body["messages"] == [
        {"role": "user", "content": [text("one"), text("two"), text("three")]},
        {"role": "assistant", "content": [text("four"), text("five")]},
        {"role": "user", "content": [text("six")]},
    ]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "Only a system prompt."}],
        [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"}],
    ],
    ids=["system", "system+developer"],
)
def test_no_user_message_is_400(e2e: Stack, messages: list[dict[str, Any]]) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(model=SONNET, messages=messages)  # type: ignore[arg-type]
    assert raised.value.status_code == 400
    assert error_of(raised.value)["message"] == "messages: must contain at least one user message"
    assert raised.value.param == "messages"
    assert raised.value.type == "invalid_request_error"
    assert upstream_records(e2e) == []


# -- output limits and stop -------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_output_model(stack: Stack) -> Iterator[str]:
    """A catalog model whose maximum output is below the 32,000-token default."""
    from catalog.models import Model
    from catalog.services import bump_catalog_version, copy_model

    with stack.blocker.unblock():
        copy_model(Model.objects.get(id=SONNET), SMALL_MODEL, max_output_tokens=SMALL_MAX_OUTPUT)
        bump_catalog_version()
    try:
        api = client(stack, stack.new_key())
        deadline = time.monotonic() + 60  # the e2e gateway polls the catalog every 0.5 s
        while SMALL_MODEL not in {m.id for m in api.models.list()}:
            assert time.monotonic() < deadline, "the gateway never saw the new model"
            time.sleep(0.1)
        yield SMALL_MODEL
    finally:
        with stack.blocker.unblock():
            Model.objects.filter(id=SMALL_MODEL).delete()
            bump_catalog_version()


@pytest.mark.parametrize(
    ("model", "limits", "expected"),
    [
        (SONNET, {"max_completion_tokens": 50, "max_tokens": 70}, 50),
        (SONNET, {"max_tokens": 70, "max_completion_tokens": 50}, 50),
        (SONNET, {"max_tokens": 70}, 70),
        (SONNET, {"max_completion_tokens": 64000}, 64000),
        (SONNET, {}, 32000),
        (OPUS_46, {}, 32000),
        ("small", {}, SMALL_MAX_OUTPUT),
    ],
)
def test_max_tokens_choice(
    e2e: Stack, small_output_model: str, model: str, limits: dict[str, int], expected: int
) -> None:
    key = e2e.new_key()
    client(e2e, key).chat.completions.create(
        model=small_output_model if model == "small" else model,
        messages=[{"role": "user", "content": "hi"}],
        **limits,
    )
    assert upstream(e2e)["max_tokens"] == expected


def test_max_tokens_above_model_maximum_is_400(e2e: Stack) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=SONNET, max_completion_tokens=128_001, messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.param == "max_completion_tokens"
    assert "max_completion_tokens" in raised.value.message
    assert upstream_records(e2e) == []


@pytest.mark.parametrize(
    ("stop", "sequences", "content"),
    [
        ("END", ["END"], "Simulated reply to: Say "),
        (["reply", "###"], ["reply", "###"], "Simulated "),
    ],
)
def test_stop_becomes_stop_sequences(
    e2e: Stack, stop: str | list[str], sequences: list[str], content: str
) -> None:
    completion, body = send(e2e, stop=stop, messages=[{"role": "user", "content": "Say END"}])
    assert body["stop_sequences"] == sequences
    assert "stop" not in body
    # The simulator cuts "Simulated reply to: Say END" at the first sequence (stop_sequence).
    assert completion.choices[0].message.content == content
    assert completion.choices[0].finish_reason == "stop"


# -- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "params", "expected"),
    [
        (OPUS_46, {"temperature": 0.3, "top_p": 0.9}, {"temperature": 0.3, "top_p": 0.9}),
        (SONNET_46, {"temperature": 1.7}, {"temperature": 1}),  # capped at 1
        (HAIKU, {"temperature": 0}, {"temperature": 0}),  # 0 is a value, not "unset"
        (HAIKU, {"top_p": 1}, {}),  # top_p only below 1
        (HAIKU, {"top_p": 0.99}, {"top_p": 0.99}),
        (SONNET, {"temperature": 0.5, "top_p": 0.5}, {}),  # sampling false: dropped silently
        (SONNET, {"temperature": 0}, {}),
        (OPUS_46, {"temperature": 0.5, "reasoning_effort": "low"}, {}),  # thinking on: dropped
        # A forced tool turns thinking off, so sampling is forwarded again.
        (
            OPUS_46,
            {"temperature": 0.5, "reasoning_effort": "low", "tool_choice": "required"},
            {"temperature": 0.5},
        ),
    ],
)
def test_sampling_forwarded_only_when_allowed(
    e2e: Stack, model: str, params: dict[str, Any], expected: dict[str, float]
) -> None:
    tools = {"tools": [WEATHER_TOOL]} if "tool_choice" in params else {}
    completion, body = send(
        e2e, model=model, messages=[{"role": "user", "content": "hi"}], **tools, **params
    )
    sent = {k: body[k] for k in ("temperature", "top_p") if k in body}
    assert sent == expected
    assert completion.choices[0].finish_reason in ("stop", "tool_calls")


# -- response_format --------------------------------------------------------------------------

CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "population": {"type": "integer"},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


def test_json_schema_becomes_output_config_format(e2e: Stack) -> None:
    completion, body = send(
        e2e,
        messages=[{"role": "user", "content": "Largest city in Norway?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": CITY_SCHEMA},
        },
    )
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": CITY_SCHEMA}}
    assert "response_format" not in body
    answer = json.loads(completion.choices[0].message.content)
    assert set(answer) == {"city", "population"}


class City(pydantic.BaseModel):
    city: str
    population: int


def test_sdk_parse_with_pydantic_model(e2e: Stack) -> None:
    # The SDK's own schema generator marks objects closed, as the gateway requires.
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.parse(
        model=SONNET,
        max_completion_tokens=200,
        messages=[{"role": "user", "content": "Largest city in Norway?"}],
        response_format=City,
    )
    assert isinstance(completion.choices[0].message.parsed, City)
    schema = upstream(e2e)["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"city", "population"}


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        (
            {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "additionalProperties": True,
            },
            "response_format.json_schema.schema",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "tags": {
                        "type": "array",
                        "items": {"type": "object", "additionalProperties": {"type": "string"}},
                    }
                },
            },
            "response_format.json_schema.schema.properties.tags.items",
        ),
    ],
)
def test_schema_allowing_extra_properties_is_400_naming_the_path(
    e2e: Stack, schema: dict[str, Any], path: str
) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=SONNET,
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        )
    assert raised.value.param == path
    message = error_of(raised.value)["message"]
    assert message.startswith(f"{path}: objects may not allow additional properties")
    assert upstream_records(e2e) == []


def test_open_object_schema_is_closed_by_the_gateway(e2e: Stack) -> None:
    schema = {
        "type": "object",
        "properties": {
            "address": {"type": "object", "properties": {"street": {"type": "string"}}},
        },
        "required": ["address"],
    }
    key = e2e.new_key()
    completion = client(e2e, key).chat.completions.create(
        model=SONNET,
        messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    )
    sent = upstream(e2e)["output_config"]["format"]["schema"]
    assert sent["additionalProperties"] is False
    assert sent["properties"]["address"]["additionalProperties"] is False
    assert json.loads(completion.choices[0].message.content or "")["address"] == {"street": "Oslo"}


def test_json_object_is_400_pointing_to_json_schema(e2e: Stack) -> None:
    key = e2e.new_key()
    with pytest.raises(openai.BadRequestError) as raised:
        client(e2e, key).chat.completions.create(
            model=SONNET,
            messages=[{"role": "user", "content": "Reply in JSON"}],
            response_format={"type": "json_object"},
        )
    assert raised.value.param == "response_format"
    assert raised.value.type == "invalid_request_error"
    assert "json_object" in raised.value.message and "json_schema" in raised.value.message
    assert upstream_records(e2e) == []


# -- ignored and accepted fields --------------------------------------------------------------

IGNORED = {
    "user": "user-42",
    "seed": 7,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "store": True,
    "metadata": {"team": "search"},
    "service_tier": "flex",
}


def test_ignored_fields_never_reach_the_model(e2e: Stack) -> None:
    completion, body = send(
        e2e,
        messages=[{"role": "user", "content": "hi", "name": "alice"}],
        n=1,
        logprobs=False,
        extra_body={
            "some_future_field": {"x": 1},
            "prediction": {"type": "content", "content": "p"},
        },
        **IGNORED,
    )
    assert set(body) <= ANTHROPIC_KEYS, set(body) - ANTHROPIC_KEYS
    raw = json.dumps(body)
    leaked = [
        v for v in ("user-42", "search", "some_future_field", "prediction", "alice") if v in raw
    ]
    assert leaked == []
    assert body["messages"] == [{"role": "user", "content": [text("hi")]}]
    assert completion.choices[0].message.content == "Simulated reply to: hi"


def test_upstream_body_for_a_plain_request_is_minimal(e2e: Stack) -> None:
    _, body = send(e2e, messages=[{"role": "user", "content": "hi"}])
    assert without_cache_control(body) == {
        "model": "claude-sonnet-5-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [text("hi")]}],
    }
