from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from simulator.testing import SimulatorThread
from tests.media_samples import b64, png

API_KEY = "sk-sim-test"
MODEL = "claude-sim-1"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
TIME_TOOL = {
    "name": "get_time",
    "input_schema": {
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
    },
}


# The simulator is reset before every test (`sim`, `client`: tests/simulator/conftest.py).
pytestmark = pytest.mark.usefixtures("reset_sim")


def post(
    sim: SimulatorThread, body: Any, path: str = "/v1/messages", **headers: str
) -> httpx.Response:
    return httpx.post(
        f"{sim.url}{path}", json=body, headers={"x-api-key": API_KEY, **headers}, timeout=10
    )


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_create_returns_full_message_object(sim: SimulatorThread) -> None:
    resp = post(sim, {"model": MODEL, "max_tokens": 100, "messages": user("Hello simulator")})
    assert resp.status_code == 200
    assert resp.headers["request-id"].startswith("req_")
    data = resp.json()
    assert data["id"].startswith("msg_")
    assert (data["type"], data["role"], data["model"]) == ("message", "assistant", MODEL)
    assert data["content"] == [{"type": "text", "text": "Simulated reply to: Hello simulator"}]
    assert (data["stop_reason"], data["stop_sequence"]) == ("end_turn", None)
    usage = data["usage"]
    assert usage["input_tokens"] == 4  # ceil(15 / 4)
    assert usage["output_tokens"] == 9  # ceil(35 / 4)
    assert usage["cache_creation_input_tokens"] == 0
    assert usage["cache_read_input_tokens"] == 0
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": 0,
    }
    assert usage["output_tokens_details"] == {"thinking_tokens": 0}


def test_sdk_create_and_text_snippet(client: anthropic.Anthropic) -> None:
    long_question = "Q" * 100
    message = client.messages.create(model=MODEL, max_tokens=100, messages=user(long_question))
    assert message.content[0].type == "text"
    assert message.content[0].text == "Simulated reply to: " + "Q" * 60
    assert message.model == MODEL


def test_long_answer_has_about_200_words(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL, max_tokens=4000, messages=user("Please give a long answer about gateways")
    )
    text = message.content[0].text
    assert 190 <= len(text.split()) <= 230
    assert message.stop_reason == "end_turn"


def test_auth_failures(sim: SimulatorThread) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": user("hi")}
    missing = httpx.post(f"{sim.url}/v1/messages", json=body)
    wrong = httpx.post(f"{sim.url}/v1/messages", json=body, headers={"x-api-key": "nope"})
    for resp in (missing, wrong):
        assert resp.status_code == 401
        data = resp.json()
        assert data["type"] == "error"
        assert data["error"]["type"] == "authentication_error"
        assert data["request_id"] == resp.headers["request-id"]
    bearer = httpx.post(
        f"{sim.url}/v1/messages", json=body, headers={"authorization": f"Bearer {API_KEY}"}
    )
    assert bearer.status_code == 200


def test_sdk_raises_authentication_error(sim: SimulatorThread) -> None:
    bad = anthropic.Anthropic(base_url=sim.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad.messages.create(model=MODEL, max_tokens=10, messages=user("hi"))
    assert info.value.request_id is not None and info.value.request_id.startswith("req_")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"max_tokens": 10, "messages": user("hi")}, "model: Field required"),
        ({"model": MODEL, "messages": user("hi")}, "max_tokens: Field required"),
        ({"model": MODEL, "max_tokens": "10", "messages": user("hi")}, "max_tokens:"),
        ({"model": MODEL, "max_tokens": -1, "messages": user("hi")}, "max_tokens:"),
        ({"model": MODEL, "max_tokens": 10, "messages": []}, "messages:"),
        ({"model": MODEL, "max_tokens": 10}, "messages: Field required"),
        (
            {"model": MODEL, "max_tokens": 10, "messages": [{"role": "bot", "content": "x"}]},
            "messages.0.role",
        ),
        (
            {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": 3}]},
            "messages.0.content",
        ),
        (
            {"model": MODEL, "max_tokens": 10, "messages": user("hi"), "tools": [{"name": "x"}]},
            "tools.0.custom.input_schema",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 10,
                "messages": user("hi"),
                "stream": True,
                "thinking": {"type": "enabled", "budget_tokens": 100},
            },
            "budget_tokens",
        ),
    ],
)
def test_validation_errors(sim: SimulatorThread, body: dict[str, Any], expected: str) -> None:
    resp = post(sim, body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert expected in error["message"]


def test_invalid_json_and_unknown_path(sim: SimulatorThread) -> None:
    resp = httpx.post(
        f"{sim.url}/v1/messages", content=b"{not json", headers={"x-api-key": API_KEY}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    missing = httpx.post(f"{sim.url}/v1/nothing", json={}, headers={"x-api-key": API_KEY})
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"


def test_tool_use_single_and_input_from_schema(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL, max_tokens=200, tools=[WEATHER_TOOL, TIME_TOOL], messages=user("Weather?")
    )
    assert message.stop_reason == "tool_use"
    assert len(message.content) == 1
    block = message.content[0]
    assert block.type == "tool_use"
    assert block.id.startswith("toolu_")
    assert block.name == "get_weather"
    assert block.input == {"city": "Oslo", "days": 1, "metric": True, "unit": "celsius"}


def test_forced_tool_and_parallel_calls(client: anthropic.Anthropic) -> None:
    forced = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "tool", "name": "get_time"},
        messages=user("What time is it?"),
    )
    assert [b.name for b in forced.content if b.type == "tool_use"] == ["get_time"]

    both = client.messages.create(
        model=MODEL, max_tokens=200, tools=[WEATHER_TOOL, TIME_TOOL], messages=user("do both")
    )
    assert [b.name for b in both.content] == ["get_weather", "get_time"]
    assert both.content[0].id != both.content[1].id

    single = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=user("do both"),
    )
    assert len(single.content) == 1

    none = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "none"},
        messages=user("Weather?"),
    )
    assert none.content[0].type == "text"
    assert none.stop_reason == "end_turn"


def test_tool_result_turn_gets_text(client: anthropic.Anthropic) -> None:
    first = client.messages.create(
        model=MODEL, max_tokens=200, tools=[WEATHER_TOOL], messages=user("Weather in Oslo?")
    )
    tool_use = first.content[0]
    second = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER_TOOL],
        messages=[
            *user("Weather in Oslo?"),
            {"role": "assistant", "content": [tool_use.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "9°C, rain"}
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "Tool said: 9°C, rain"


def test_json_schema_output(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temps": {"type": "array", "items": {"type": "number"}},
            "kind": {"$ref": "#/$defs/kind"},
        },
        "required": ["city", "temps", "kind"],
        "additionalProperties": False,
        "$defs": {"kind": {"type": "string", "enum": ["sunny", "rain"]}},
    }
    resp = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=user("Give me JSON"),
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    assert json.loads(resp.content[0].text) == {"city": "Oslo", "temps": [1], "kind": "sunny"}


def test_stop_sequence_and_max_tokens(client: anthropic.Anthropic) -> None:
    stopped = client.messages.create(
        model=MODEL, max_tokens=100, stop_sequences=["reply"], messages=user("hello")
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == "reply"
    assert stopped.content[0].text == "Simulated "

    truncated = client.messages.create(model=MODEL, max_tokens=3, messages=user("hello"))
    assert truncated.stop_reason == "max_tokens"
    assert truncated.content[0].text == "Simulated re"  # 3 tokens x 4 characters
    assert truncated.usage.output_tokens == 3


def test_count_tokens_matches_create_usage(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "system": "You are terse.",
        "tools": [WEATHER_TOOL],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe this picture please"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": b64(png(1000, 1000)),
                        },
                    },
                ],
            }
        ],
    }
    counted = client.messages.count_tokens(**kwargs)
    created = client.messages.create(max_tokens=50, **kwargs)
    assert counted.input_tokens == created.usage.input_tokens
    assert counted.input_tokens > 1296  # the image alone is ⌈1000/28⌉² = 1,296


def test_count_tokens_validation(sim: SimulatorThread) -> None:
    resp = post(sim, {"messages": user("hi")}, path="/v1/messages/count_tokens")
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "model: Field required"


def test_requests_are_recorded_with_headers(sim: SimulatorThread) -> None:
    betas = "interleaved-thinking-2025-05-14,context-1m-2025-08-07"
    post(
        sim,
        {"model": MODEL, "max_tokens": 10, "messages": user("recorded")},
        **{"anthropic-beta": betas, "X-Custom-Header": "Yes"},
    )
    records = sim.requests()
    assert len(records) == 1
    record = records[0]
    assert record["method"] == "POST"
    assert record["path"] == "/v1/messages"
    assert record["headers"]["anthropic-beta"] == betas
    assert record["headers"]["x-custom-header"] == "Yes"
    assert record["body"]["messages"][0]["content"] == "recorded"
    assert record["status"] == "200"
    # Control calls are not recorded.
    assert len(sim.requests()) == 1


def dump(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [block.model_dump(exclude_none=True) for block in message.content]


def test_determinism_json_vs_stream(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 3000,
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": user("Check both for me"),
    }
    plain = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    again = client.messages.create(**kwargs)
    assert dump(plain) == dump(streamed) == dump(again)
    assert plain.usage.model_dump() == streamed.usage.model_dump() == again.usage.model_dump()
    assert plain.stop_reason == streamed.stop_reason == "tool_use"
    assert plain.id != again.id


def test_max_tokens_zero_prewarm(sim: SimulatorThread) -> None:
    resp = post(sim, {"model": MODEL, "max_tokens": 0, "messages": user("warm")})
    assert resp.status_code == 200
    data = resp.json()
    assert (data["content"], data["stop_reason"]) == ([], "max_tokens")
    refused = post(sim, {"model": MODEL, "max_tokens": 0, "stream": True, "messages": user("x")})
    assert refused.status_code == 400
